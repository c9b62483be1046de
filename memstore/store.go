package memstore

import (
	"fmt"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"time"
	"unique"

	utiljson "k8s.io/apimachinery/pkg/util/json"

	memdb "github.com/hashicorp/go-memdb"
)

// Resource is a scanned resource in the compact form the store keeps: the
// object as compact JSON, decoded when it is evaluated. A decoded Pod takes
// about 10 KiB of maps; its JSON about 1.5 KiB.
// Values read from the store are shared: never modify one, copy it.
type Resource struct {
	UID string
	// Group, Version, Kind and Namespace are interned: thousands of
	// resources share one copy of each.
	Group, Version, Kind string
	Namespace, Name      string
	ResourceVersion      string
	// Hash is the content hash (status and metadata noise excluded): a change
	// of it, not of the resourceVersion, means the resource must be rescanned.
	Hash uint64
	// AdmissionHash is the hash admission results are bound to
	// (report.AdmissionHash), which the BackgroundScanReport's hash label
	// carries for the merger to compare; 0 means Hash.
	AdmissionHash uint64
	// Data is the resource as JSON, without managedFields and other fields
	// no policy reads.
	Data []byte
}

// NewResource makes a Resource of an object's JSON; the identifying strings
// are interned.
func NewResource(uid, group, version, kind, namespace, name, resourceVersion string, hash uint64, data []byte) *Resource {
	return &Resource{
		UID: uid, Group: unique.Make(group).Value(), Version: unique.Make(version).Value(), Kind: unique.Make(kind).Value(),
		Namespace: unique.Make(namespace).Value(), Name: name, ResourceVersion: resourceVersion, Hash: hash, Data: data,
	}
}

// Object decodes the resource (integers as int64, as the API machinery
// does). Each call returns a fresh value the caller may keep or modify.
func (r *Resource) Object() (map[string]any, error) {
	var obj map[string]any
	if err := utiljson.Unmarshal(r.Data, &obj); err != nil {
		return nil, fmt.Errorf("decode resource %s: %w", r.UID, err)
	}
	return obj, nil
}

// Policy is a policy as the scanner tracks it, for the indexes that find
// the results of a policy and the policies to scan (the compiled form is
// the scanner's policy set's alone).
type Policy struct {
	// Name is the policy's key: its report name ("name" for a ClusterPolicy,
	// "namespace/name" for a Policy), or for a CEL policy its kind and
	// report name ("ValidatingPolicy/name"), which cannot collide with those.
	Name string
	// ReportName and Source are what the policy's results carry: they tell
	// its results apart from those of a policy of another kind with the
	// same report name. Empty: the results whose policy is Name.
	ReportName, Source string
	Namespace          string
	ResourceVersion    string
	// Background is false for policies that are not scanned.
	Background bool
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

// Entry is what a result says, its time aside: a report entry. Entries are
// interned (unique.Handle): the thousands of equal entries ("rule x passed"
// for every Pod) share one copy, and two handles are equal exactly when
// their entries are.
type Entry struct {
	Policy, Rule, Result, Message string
	Category, Severity, Source    string
	Scored                        bool
	// Properties is the entry's properties in the caller's canonical
	// encoding (a string, so that Entry is comparable).
	Properties string
}

// Key is the entry's result identity (source, policy, rule).
func (e Entry) Key() wgv1alpha2.ResultKey {
	return wgv1alpha2.ResultKey{Source: e.Source, Policy: e.Policy, Rule: e.Rule}
}

// Result is the current result of one rule of one policy for one resource:
// 16 bytes, its entry shared.
type Result struct {
	Entry unique.Handle[Entry]
	// Changed is when (Unix nanoseconds) the entry last changed, not when it
	// was last evaluated.
	Changed int64
}

// NewResult interns an entry and stamps it.
func NewResult(e Entry, changed time.Time) Result {
	return Result{Entry: unique.Make(e), Changed: changed.UnixNano()}
}

// Value returns the result's entry.
func (r Result) Value() Entry { return r.Entry.Value() }

// ChangedAt returns when the result last changed.
func (r Result) ChangedAt() time.Time { return time.Unix(0, r.Changed) }

// ResourceResult is a result with the UID of its resource.
type ResourceResult struct {
	UID string
	Result
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
