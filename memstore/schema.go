package memstore

import (
	"fmt"

	memdb "github.com/hashicorp/go-memdb"
)

// Tables.
const (
	tableResources  = "resources"
	tablePolicies   = "policies"
	tableExceptions = "exceptions"
	tableNamespaces = "namespaces"
	tableResults    = "results"
	tableScans      = "scans"
)

// Indexes. "id" is go-memdb's mandatory primary index.
const (
	indexID          = "id"
	indexGroupKindNS = "group_kind_namespace"
	indexPolicy      = "policy"
)

// schema is the whole store. Each table has its own function, and every
// index says why it is (or is not) unique.
func schema() *memdb.DBSchema {
	return &memdb.DBSchema{Tables: map[string]*memdb.TableSchema{
		tableResources:  resourcesTable(),
		tablePolicies:   policiesTable(),
		tableExceptions: exceptionsTable(),
		tableNamespaces: namespacesTable(),
		tableResults:    resultsTable(),
		tableScans:      scansTable(),
	}}
}

// resourcesTable holds the scanned resources, keyed by UID. It has as few
// indexes as the scanner's reads need: every index entry is a radix-tree node,
// and at 10,000 resources each index costs megabytes.
func resourcesTable() *memdb.TableSchema {
	return &memdb.TableSchema{
		Name: tableResources,
		Indexes: map[string]*memdb.IndexSchema{
			// A UID names one object for its whole life: unique.
			indexID: {Name: indexID, Unique: true, Indexer: stringKey(func(o any) string { return o.(*Resource).UID })},
			// "Resources a rule can match": by group, kind and namespace; a
			// prefix read (group, kind) gives every namespace. Many per key: not unique.
			indexGroupKindNS: {Name: indexGroupKindNS, Indexer: groupKindNamespace{}},
		},
	}
}

// policiesTable holds compiled policies by report name ("name" or "ns/name").
func policiesTable() *memdb.TableSchema {
	return &memdb.TableSchema{
		Name: tablePolicies,
		Indexes: map[string]*memdb.IndexSchema{
			// Report names are unique: a Policy's carries its namespace.
			indexID: {Name: indexID, Unique: true, Indexer: stringKey(func(o any) string { return o.(*Policy).Name })},
		},
	}
}

// exceptionsTable holds PolicyExceptions by "namespace/name".
func exceptionsTable() *memdb.TableSchema {
	return &memdb.TableSchema{
		Name: tableExceptions,
		Indexes: map[string]*memdb.IndexSchema{
			indexID: {Name: indexID, Unique: true, Indexer: stringKey(func(o any) string { return o.(*Exception).Name })},
			// The policies an exception names: a policy's exceptions are one read. Many per policy.
			indexPolicy: {Name: indexPolicy, Indexer: stringsKey(func(o any) []string { return o.(*Exception).Policies })},
		},
	}
}

// namespacesTable holds the labels of every namespace (for namespaceSelector).
func namespacesTable() *memdb.TableSchema {
	return &memdb.TableSchema{
		Name: tableNamespaces,
		Indexes: map[string]*memdb.IndexSchema{
			indexID: {Name: indexID, Unique: true, Indexer: stringKey(func(o any) string { return o.(*Namespace).Name })},
		},
	}
}

// resultsTable holds the results of each resource: one row per resource,
// keyed by its UID, holding its (policy, rule) results sorted. One row per
// resource, and no index by policy: policy edits and deletions, which are
// rare, read every row instead, so that the common case (a resource and its
// results) costs one radix node.
func resultsTable() *memdb.TableSchema {
	return &memdb.TableSchema{
		Name: tableResults,
		Indexes: map[string]*memdb.IndexSchema{
			// One row per resource UID: unique.
			indexID: {Name: indexID, Unique: true, Indexer: stringKey(func(o any) string { return o.(*resultSet).uid })},
		},
	}
}

// scansTable records each policy's last complete background scan.
func scansTable() *memdb.TableSchema {
	return &memdb.TableSchema{
		Name: tableScans,
		Indexes: map[string]*memdb.IndexSchema{
			indexID: {Name: indexID, Unique: true, Indexer: stringKey(func(o any) string { return o.(*ScanState).Policy })},
		},
	}
}

// stringKey indexes one string of an object, without reflection. Keys end
// with a NUL so that prefix reads cannot run into longer keys.
type stringKey func(any) string

func (f stringKey) FromObject(o any) (bool, []byte, error) {
	s := f(o)
	if s == "" {
		return false, nil, nil
	}
	return true, append([]byte(s), 0), nil
}

func (f stringKey) FromArgs(args ...any) ([]byte, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("want one argument, got %d", len(args))
	}
	s, ok := args[0].(string)
	if !ok {
		return nil, fmt.Errorf("want a string argument, got %T", args[0])
	}
	return append([]byte(s), 0), nil
}

// stringsKey indexes every string of a list.
type stringsKey func(any) []string

func (f stringsKey) FromObject(o any) (bool, [][]byte, error) {
	list := f(o)
	if len(list) == 0 {
		return false, nil, nil
	}
	out := make([][]byte, 0, len(list))
	for _, s := range list {
		out = append(out, append([]byte(s), 0))
	}
	return true, out, nil
}

func (f stringsKey) FromArgs(args ...any) ([]byte, error) { return stringKey(nil).FromArgs(args...) }

// groupKindNamespace indexes a resource by "group/kind/namespace/"; its
// prefix form takes (group, kind) or (group, kind, namespace).
type groupKindNamespace struct{}

func (groupKindNamespace) FromObject(o any) (bool, []byte, error) {
	r := o.(*Resource)
	return true, []byte(r.Group + "/" + r.Kind + "/" + r.Namespace + "/\x00"), nil
}

func (groupKindNamespace) FromArgs(args ...any) ([]byte, error) {
	if len(args) != 3 {
		return nil, fmt.Errorf("want group, kind and namespace, got %d arguments", len(args))
	}
	key, err := groupKindNamespace{}.PrefixFromArgs(args...)
	if err != nil {
		return nil, err
	}
	return append(key, 0), nil
}

func (groupKindNamespace) PrefixFromArgs(args ...any) ([]byte, error) {
	if len(args) < 2 || len(args) > 3 {
		return nil, fmt.Errorf("want group, kind and maybe namespace, got %d arguments", len(args))
	}
	var key []byte
	for _, a := range args {
		s, ok := a.(string)
		if !ok {
			return nil, fmt.Errorf("want string arguments, got %T", a)
		}
		key = append(append(key, s...), '/')
	}
	return key, nil
}
