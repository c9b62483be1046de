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
	indexGroupKind   = "group_kind"
	indexGroupKindNS = "group_kind_namespace"
	indexNamespace   = "namespace"
	indexLabel       = "label"
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

// resourcesTable holds the scanned resources, keyed by UID.
func resourcesTable() *memdb.TableSchema {
	return &memdb.TableSchema{
		Name: tableResources,
		Indexes: map[string]*memdb.IndexSchema{
			// A UID names one object for its whole life: unique.
			indexID: {Name: indexID, Unique: true, Indexer: stringKey(func(o any) string { return o.(*Resource).UID })},
			// "Resources a rule can match": by group and kind (every version is one
			// object), and by group, kind and namespace. Many per key: not unique.
			indexGroupKind: {Name: indexGroupKind, Indexer: stringKey(func(o any) string { r := o.(*Resource); return r.Group + "/" + r.Kind })},
			indexGroupKindNS: {Name: indexGroupKindNS, Indexer: stringKey(func(o any) string {
				r := o.(*Resource)
				return r.Group + "/" + r.Kind + "/" + r.Namespace
			})},
			// Namespace-label changes rescan the resources of one namespace.
			indexNamespace: {Name: indexNamespace, AllowMissing: true, Indexer: stringKey(func(o any) string { return o.(*Resource).Namespace })},
			// Label selectors with matchLabels become index reads: one entry per key=value.
			indexLabel: {Name: indexLabel, AllowMissing: true, Indexer: labelIndex{}},
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
// keyed by its UID, holding its (policy, rule) results sorted. A row per
// resource rather than per rule keeps the radix trees small: with some twenty
// rules a resource, per-rule rows in four indexes made results most of the
// store's memory.
func resultsTable() *memdb.TableSchema {
	return &memdb.TableSchema{
		Name: tableResults,
		Indexes: map[string]*memdb.IndexSchema{
			// One row per resource UID: unique.
			indexID: {Name: indexID, Unique: true, Indexer: stringKey(func(o any) string { return o.(*resultSet).uid })},
			// The resources a policy has results for (policy edits and deletion). Many per policy.
			indexPolicy: {Name: indexPolicy, AllowMissing: true, Indexer: stringsKey(func(o any) []string { return o.(*resultSet).policies })},
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

// labelIndex indexes each label of a resource as "key=value".
type labelIndex struct{}

func (labelIndex) FromObject(o any) (bool, [][]byte, error) {
	labels := o.(*Resource).Labels
	if len(labels) == 0 {
		return false, nil, nil
	}
	out := make([][]byte, 0, len(labels))
	for k, v := range labels {
		out = append(out, []byte(k+"="+v+"\x00"))
	}
	return true, out, nil
}

func (labelIndex) FromArgs(args ...any) ([]byte, error) {
	if len(args) != 2 {
		return nil, fmt.Errorf("want key and value, got %d arguments", len(args))
	}
	k, ok1 := args[0].(string)
	v, ok2 := args[1].(string)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("want string key and value")
	}
	return []byte(k + "=" + v + "\x00"), nil
}
