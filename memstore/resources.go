package memstore

import "fmt"

// Resource returns a resource by UID (nil if absent).
func (r *ReadTxn) Resource(uid string) (*Resource, error) {
	res, err := first[*Resource](r.txn, tableResources, indexID, uid)
	if err != nil {
		return nil, fmt.Errorf("get resource %s: %w", uid, err)
	}
	return res, nil
}

// ResourcesOfKind returns the resources of a group and kind, in one namespace
// when namespace is not empty.
func (r *ReadTxn) ResourcesOfKind(group, kind, namespace string) ([]*Resource, error) {
	var out []*Resource
	var err error
	if namespace == "" {
		out, err = all[*Resource](r.txn, tableResources, indexGroupKindNS+"_prefix", group, kind)
	} else {
		out, err = all[*Resource](r.txn, tableResources, indexGroupKindNS, group, kind, namespace)
	}
	if err != nil {
		return nil, fmt.Errorf("list %s/%s: %w", group, kind, err)
	}
	return out, nil
}

// ResourcesInNamespace returns every resource of a namespace. It reads every
// row (namespace-label changes are rare; an index would cost every resource).
func (r *ReadTxn) ResourcesInNamespace(namespace string) ([]*Resource, error) {
	rows, err := all[*Resource](r.txn, tableResources, indexID)
	if err != nil {
		return nil, fmt.Errorf("list namespace %s: %w", namespace, err)
	}
	var out []*Resource
	for _, res := range rows {
		if res.Namespace == namespace {
			out = append(out, res)
		}
	}
	return out, nil
}

// Resources returns every resource.
func (r *ReadTxn) Resources() ([]*Resource, error) {
	return all[*Resource](r.txn, tableResources, indexID)
}

// CountResources counts the stored resources.
func (r *ReadTxn) CountResources() (int, error) { return count(r.txn, tableResources, indexID) }

// PutResource inserts or replaces a resource.
func (w *WriteTxn) PutResource(res *Resource) error {
	if res.UID == "" {
		return fmt.Errorf("put resource %s/%s: no uid", res.Namespace, res.Name)
	}
	if err := w.txn.Insert(tableResources, res); err != nil {
		return fmt.Errorf("put resource %s: %w", res.UID, err)
	}
	return nil
}

// DeleteResource removes a resource and all its results.
func (w *WriteTxn) DeleteResource(uid string) error {
	if _, err := w.txn.DeleteAll(tableResources, indexID, uid); err != nil {
		return fmt.Errorf("delete resource %s: %w", uid, err)
	}
	if _, err := w.txn.DeleteAll(tableResults, indexID, uid); err != nil {
		return fmt.Errorf("delete results of %s: %w", uid, err)
	}
	return nil
}

// Namespace returns a namespace's labels (nil if unknown).
func (r *ReadTxn) Namespace(name string) (*Namespace, error) {
	return first[*Namespace](r.txn, tableNamespaces, indexID, name)
}

// PutNamespace records a namespace's labels.
func (w *WriteTxn) PutNamespace(ns *Namespace) error {
	if err := w.txn.Insert(tableNamespaces, ns); err != nil {
		return fmt.Errorf("put namespace %s: %w", ns.Name, err)
	}
	return nil
}

// DeleteNamespace forgets a namespace.
func (w *WriteTxn) DeleteNamespace(name string) error {
	if _, err := w.txn.DeleteAll(tableNamespaces, indexID, name); err != nil {
		return fmt.Errorf("delete namespace %s: %w", name, err)
	}
	return nil
}
