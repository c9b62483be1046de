package memstore

import (
	"fmt"
	"time"
)

// Policy returns a policy by report name (nil if absent).
func (r *ReadTxn) Policy(name string) (*Policy, error) {
	return first[*Policy](r.txn, tablePolicies, indexID, name)
}

// Policies returns every policy, ordered by name.
func (r *ReadTxn) Policies() ([]*Policy, error) {
	return all[*Policy](r.txn, tablePolicies, indexID)
}

// PutPolicy inserts or replaces a policy.
func (w *WriteTxn) PutPolicy(p *Policy) error {
	if err := w.txn.Insert(tablePolicies, p); err != nil {
		return fmt.Errorf("put policy %s: %w", p.Name, err)
	}
	return nil
}

// DeletePolicy removes a policy, its results and its scan state.
func (w *WriteTxn) DeletePolicy(name string) error {
	// The results first: which are the policy's is told by its row.
	if err := w.deletePolicyResults(name); err != nil {
		return fmt.Errorf("delete results of policy %s: %w", name, err)
	}
	if _, err := w.txn.DeleteAll(tablePolicies, indexID, name); err != nil {
		return fmt.Errorf("delete policy %s: %w", name, err)
	}
	if _, err := w.txn.DeleteAll(tableScans, indexID, name); err != nil {
		return fmt.Errorf("delete scan state of %s: %w", name, err)
	}
	return nil
}

// Exceptions returns every exception.
func (r *ReadTxn) Exceptions() ([]*Exception, error) {
	return all[*Exception](r.txn, tableExceptions, indexID)
}

// ExceptionsFor returns the exceptions that name a policy.
func (r *ReadTxn) ExceptionsFor(policy string) ([]*Exception, error) {
	return all[*Exception](r.txn, tableExceptions, indexPolicy, policy)
}

// PutException inserts or replaces an exception.
func (w *WriteTxn) PutException(e *Exception) error {
	if err := w.txn.Insert(tableExceptions, e); err != nil {
		return fmt.Errorf("put exception %s: %w", e.Name, err)
	}
	return nil
}

// DeleteException removes an exception.
func (w *WriteTxn) DeleteException(name string) error {
	if _, err := w.txn.DeleteAll(tableExceptions, indexID, name); err != nil {
		return fmt.Errorf("delete exception %s: %w", name, err)
	}
	return nil
}

// LastScan returns when a policy's last background scan completed (zero if never).
func (r *ReadTxn) LastScan(policy string) (time.Time, error) {
	s, err := first[*ScanState](r.txn, tableScans, indexID, policy)
	if err != nil || s == nil {
		return time.Time{}, err
	}
	return s.LastComplete, nil
}

// SetLastScan records a policy's completed scan. A time earlier than the
// one recorded changes nothing: two scans that end in the other order (a
// forced rescan and a scheduled one, or the back-dated first scan of a new
// policy) leave the later.
func (w *WriteTxn) SetLastScan(policy string, at time.Time) error {
	prev, err := first[*ScanState](w.txn, tableScans, indexID, policy)
	if err != nil {
		return fmt.Errorf("set last scan of %s: %w", policy, err)
	}
	if prev != nil && !at.After(prev.LastComplete) {
		return nil
	}
	if err := w.txn.Insert(tableScans, &ScanState{Policy: policy, LastComplete: at}); err != nil {
		return fmt.Errorf("set last scan of %s: %w", policy, err)
	}
	return nil
}
