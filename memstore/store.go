package memstore

import (
	"fmt"
	"time"

	memdb "github.com/hashicorp/go-memdb"
)

// Resource is a scanned resource in the compact form evaluation needs.
// Values read from the store are shared: never modify one, copy it.
type Resource struct {
	UID                  string
	Group, Version, Kind string
	Namespace, Name      string
	Labels               map[string]string
	ResourceVersion      string
	// Hash is the content hash (status and metadata noise excluded): a change
	// of it, not of the resourceVersion, means the resource must be rescanned.
	Hash uint64
	// Object is the resource as JSON-decoded values, without managedFields and
	// other fields no policy reads.
	Object map[string]any
}

// Policy is a policy as the scanner tracks it. Compiled holds the engine's
// compiled form; memstore does not look into it.
type Policy struct {
	// Name is the report name: "name" for a ClusterPolicy, "namespace/name" for a Policy.
	Name            string
	Namespace       string
	ResourceVersion string
	// Background is false for policies that are not scanned.
	Background bool
	// RuleHashes maps each validate rule (autogen included) to a hash of its spec.
	RuleHashes map[string]uint64
	Compiled   any
}

// Exception is a PolicyException; Compiled is the engine's form.
type Exception struct {
	Name     string // namespace/name
	Policies []string
	Compiled any
}

// Namespace holds the labels of a namespace.
type Namespace struct {
	Name   string
	Labels map[string]string
}

// Result is the current result of one rule of one policy for one resource.
type Result struct {
	ResourceUID string
	Policy      string
	Rule        string
	Result      string
	Message     string
	// Digest identifies the whole entry but its timestamp (e.g. a hash of the
	// report result): equal digests mean nothing a report shows has changed.
	Digest uint64
	// Changed is when this result last changed (not when it was last evaluated).
	Changed time.Time
	// Payload is the caller's full entry (e.g. the report result); not indexed.
	Payload any
}

// ScanState is the persisted schedule state of a policy.
type ScanState struct {
	Policy       string
	LastComplete time.Time
}

// Store is tally's in-memory state. Reads see a consistent snapshot; writes
// are serialised by go-memdb.
type Store struct {
	db *memdb.MemDB
}

// New makes an empty store.
func New() (*Store, error) {
	db, err := memdb.NewMemDB(schema())
	if err != nil {
		return nil, fmt.Errorf("memstore: %w", err)
	}
	return &Store{db: db}, nil
}

// ReadTxn is a consistent snapshot.
type ReadTxn struct{ txn *memdb.Txn }

// WriteTxn is a write transaction; it also reads its own writes.
type WriteTxn struct{ ReadTxn }

// Read opens a snapshot. It needs no closing.
func (s *Store) Read() *ReadTxn { return &ReadTxn{txn: s.db.Txn(false)} }

// Write runs fn in a write transaction and commits it if fn returns nil.
func (s *Store) Write(fn func(*WriteTxn) error) error {
	txn := s.db.Txn(true)
	defer txn.Abort()
	if err := fn(&WriteTxn{ReadTxn{txn: txn}}); err != nil {
		return err
	}
	txn.Commit()
	return nil
}

func first[T any](txn *memdb.Txn, table, index string, args ...any) (T, error) {
	var zero T
	raw, err := txn.First(table, index, args...)
	if err != nil || raw == nil {
		return zero, err
	}
	return raw.(T), nil
}

func all[T any](txn *memdb.Txn, table, index string, args ...any) ([]T, error) {
	it, err := txn.Get(table, index, args...)
	if err != nil {
		return nil, err
	}
	var out []T
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw.(T))
	}
	return out, nil
}

func count(txn *memdb.Txn, table, index string, args ...any) (int, error) {
	it, err := txn.Get(table, index, args...)
	if err != nil {
		return 0, err
	}
	n := 0
	for raw := it.Next(); raw != nil; raw = it.Next() {
		n++
	}
	return n, nil
}
