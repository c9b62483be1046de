package memstore

import (
	"fmt"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"sort"
)

// resultSet is the stored row of one resource's results, sorted by policy
// and rule. Rows are immutable: a change writes a new row.
type resultSet struct {
	uid     string
	results []Result
}

func (r *ReadTxn) resultSet(uid string) (*resultSet, error) {
	return first[*resultSet](r.txn, tableResults, indexID, uid)
}

// Results returns a resource's results, ordered by policy and rule. The
// slice is the store's: do not modify it.
func (r *ReadTxn) Results(uid string) ([]Result, error) {
	set, err := r.resultSet(uid)
	if err != nil {
		return nil, fmt.Errorf("results of %s: %w", uid, err)
	}
	if set == nil {
		return nil, nil
	}
	return set.results, nil
}

// ResultsOfPolicy returns every result of a policy, with its resource. It
// reads every row: policy edits and deletions are rare.
func (r *ReadTxn) ResultsOfPolicy(policy string) ([]ResourceResult, error) {
	sets, err := all[*resultSet](r.txn, tableResults, indexID)
	if err != nil {
		return nil, fmt.Errorf("results of policy %s: %w", policy, err)
	}
	owns, err := resultsOf(r.txn, policy)
	if err != nil {
		return nil, fmt.Errorf("results of policy %s: %w", policy, err)
	}
	var out []ResourceResult
	for _, set := range sets {
		for _, res := range set.results {
			if owns(res.Value()) {
				out = append(out, ResourceResult{UID: set.uid, Result: res})
			}
		}
	}
	return out, nil
}

// CountResults counts results with an outcome ("pass", "fail", ...). It reads
// every row: for metrics, not for hot paths.
func (r *ReadTxn) CountResults(outcome string) (int, error) {
	sets, err := all[*resultSet](r.txn, tableResults, indexID)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, set := range sets {
		for _, res := range set.results {
			if res.Value().Result == outcome {
				n++
			}
		}
	}
	return n, nil
}

// ReplaceResults makes results the whole result set of (resource, policy):
// entries not in it go, so results that no longer apply vanish. A result
// whose entry is unchanged keeps its stored time. It reports whether
// anything changed.
func (w *WriteTxn) ReplaceResults(uid, policy string, results []Result) (bool, error) {
	for _, r := range results {
		if p := r.Value().Policy; p != policy {
			return false, fmt.Errorf("replace results of %s/%s: result of policy %s", uid, policy, p)
		}
	}
	set, err := w.resultSet(uid)
	if err != nil {
		return false, fmt.Errorf("replace results of %s/%s: %w", uid, policy, err)
	}
	var whole []Result
	if set != nil {
		for _, r := range set.results {
			if r.Value().Policy != policy {
				whole = append(whole, r)
			}
		}
	}
	return w.SetResults(uid, append(whole, results...))
}

// putResultSet writes a resource's results (deleting the row when empty).
func (w *WriteTxn) putResultSet(uid string, results []Result) error {
	if len(results) == 0 {
		if _, err := w.txn.DeleteAll(tableResults, indexID, uid); err != nil {
			return fmt.Errorf("delete results of %s: %w", uid, err)
		}
		return nil
	}
	sortResults(results)
	// The row keeps exactly its length: rows live as long as their resource.
	rows := make([]Result, len(results))
	copy(rows, results)
	if err := w.txn.Insert(tableResults, &resultSet{uid: uid, results: rows}); err != nil {
		return fmt.Errorf("put results of %s: %w", uid, err)
	}
	return nil
}

func sortResults(results []Result) {
	sort.Slice(results, func(i, j int) bool {
		a, b := results[i].Entry.Value(), results[j].Entry.Value()
		if a.Policy != b.Policy {
			return a.Policy < b.Policy
		}
		return a.Rule < b.Rule
	})
}

// deletePolicyResults removes a policy's results from every resource.
func (w *WriteTxn) deletePolicyResults(policy string) error {
	sets, err := all[*resultSet](w.txn, tableResults, indexID)
	if err != nil {
		return err
	}
	owns, err := resultsOf(w.txn, policy)
	if err != nil {
		return err
	}
	for _, set := range sets {
		kept := make([]Result, 0, len(set.results))
		for _, r := range set.results {
			if !owns(r.Value()) {
				kept = append(kept, r)
			}
		}
		if len(kept) == len(set.results) {
			continue
		}
		if err := w.putResultSet(set.uid, kept); err != nil {
			return err
		}
	}
	return nil
}

// SetResults makes results the whole result set of a resource (every
// policy). A result whose entry is unchanged keeps its stored time. It
// reports whether anything changed. Two results for one (policy, rule) are
// an error.
func (w *WriteTxn) SetResults(uid string, results []Result) (bool, error) {
	set, err := w.resultSet(uid)
	if err != nil {
		return false, fmt.Errorf("set results of %s: %w", uid, err)
	}
	prev := map[wgv1alpha2.ResultKey]Result{}
	if set != nil {
		for _, r := range set.results {
			prev[r.Value().Key()] = r
		}
	}
	changed := len(prev) != len(results)
	merged := make([]Result, 0, len(results))
	seen := make(map[wgv1alpha2.ResultKey]bool, len(results))
	for _, r := range results {
		e := r.Value()
		k := e.Key()
		if seen[k] {
			return false, fmt.Errorf("set results of %s: two results for %s/%s", uid, e.Policy, e.Rule)
		}
		seen[k] = true
		if p, ok := prev[k]; ok && p.Entry == r.Entry {
			merged = append(merged, p)
			continue
		}
		changed = true
		merged = append(merged, r)
	}
	if !changed {
		return false, nil
	}
	return true, w.putResultSet(uid, merged)
}

// resultsOf tells the results of a policy (by its key): those of its report
// name and source when the store knows it, else those whose policy is the
// key.
func resultsOf(txn interface {
	First(table, index string, args ...any) (any, error)
}, key string) (func(Entry) bool, error) {
	raw, err := txn.First(tablePolicies, indexID, key)
	if err != nil {
		return nil, err
	}
	if p, ok := raw.(*Policy); ok && p.ReportName != "" {
		return func(e Entry) bool { return e.Policy == p.ReportName && (p.Source == "" || e.Source == p.Source) }, nil
	}
	return func(e Entry) bool { return e.Policy == key }, nil
}
