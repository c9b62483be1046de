package memstore

import (
	"fmt"
	"sort"
)

// resultSet is the stored row of one resource's results, sorted by policy
// and rule. Rows are immutable: a change writes a new row.
type resultSet struct {
	uid      string
	policies []string // distinct, sorted
	results  []*Result
}

func (r *ReadTxn) resultSet(uid string) (*resultSet, error) {
	return first[*resultSet](r.txn, tableResults, indexID, uid)
}

// Results returns a resource's results, ordered by policy and rule.
func (r *ReadTxn) Results(uid string) ([]*Result, error) {
	set, err := r.resultSet(uid)
	if err != nil {
		return nil, fmt.Errorf("results of %s: %w", uid, err)
	}
	if set == nil {
		return nil, nil
	}
	return set.results, nil
}

// ResultsOfPolicy returns every result of a policy.
func (r *ReadTxn) ResultsOfPolicy(policy string) ([]*Result, error) {
	sets, err := all[*resultSet](r.txn, tableResults, indexID)
	if err != nil {
		return nil, fmt.Errorf("results of policy %s: %w", policy, err)
	}
	var out []*Result
	for _, set := range sets {
		for _, res := range set.results {
			if res.Policy == policy {
				out = append(out, res)
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
			if res.Result == outcome {
				n++
			}
		}
	}
	return n, nil
}

// ReplaceResults makes results the whole result set of (resource, policy):
// entries not in it go, so results that no longer apply vanish. A result
// whose outcome, message and digest are unchanged keeps its stored value (and
// so its Changed time). It reports whether anything changed.
func (w *WriteTxn) ReplaceResults(uid, policy string, results []*Result) (bool, error) {
	for _, r := range results {
		if r.ResourceUID != uid || r.Policy != policy {
			return false, fmt.Errorf("replace results of %s/%s: result for %s/%s", uid, policy, r.ResourceUID, r.Policy)
		}
	}
	set, err := w.resultSet(uid)
	if err != nil {
		return false, fmt.Errorf("replace results of %s/%s: %w", uid, policy, err)
	}
	var whole []*Result
	if set != nil {
		for _, r := range set.results {
			if r.Policy != policy {
				whole = append(whole, r)
			}
		}
	}
	return w.SetResults(uid, append(whole, results...))
}

// putResultSet writes a resource's results (deleting the row when empty).
func (w *WriteTxn) putResultSet(uid string, results []*Result) error {
	if len(results) == 0 {
		if _, err := w.txn.DeleteAll(tableResults, indexID, uid); err != nil {
			return fmt.Errorf("delete results of %s: %w", uid, err)
		}
		return nil
	}
	sort.Slice(results, func(i, j int) bool {
		if results[i].Policy != results[j].Policy {
			return results[i].Policy < results[j].Policy
		}
		return results[i].Rule < results[j].Rule
	})
	var policies []string
	for _, r := range results {
		if len(policies) == 0 || policies[len(policies)-1] != r.Policy {
			policies = append(policies, r.Policy)
		}
	}
	if err := w.txn.Insert(tableResults, &resultSet{uid: uid, policies: policies, results: results}); err != nil {
		return fmt.Errorf("put results of %s: %w", uid, err)
	}
	return nil
}

// deletePolicyResults removes a policy's results from every resource.
func (w *WriteTxn) deletePolicyResults(policy string) error {
	sets, err := all[*resultSet](w.txn, tableResults, indexID)
	if err != nil {
		return err
	}
	for _, set := range sets {
		if !containsString(set.policies, policy) {
			continue
		}
		kept := make([]*Result, 0, len(set.results))
		for _, r := range set.results {
			if r.Policy != policy {
				kept = append(kept, r)
			}
		}
		if err := w.putResultSet(set.uid, kept); err != nil {
			return err
		}
	}
	return nil
}

// SetResults makes results the whole result set of a resource (every
// policy). Unchanged entries keep their stored value, as in ReplaceResults.
// It reports whether anything changed.
func (w *WriteTxn) SetResults(uid string, results []*Result) (bool, error) {
	set, err := w.resultSet(uid)
	if err != nil {
		return false, fmt.Errorf("set results of %s: %w", uid, err)
	}
	type key struct{ policy, rule string }
	prev := map[key]*Result{}
	if set != nil {
		for _, r := range set.results {
			prev[key{r.Policy, r.Rule}] = r
		}
	}
	changed := len(prev) != len(results)
	merged := make([]*Result, 0, len(results))
	for _, r := range results {
		if r.ResourceUID != uid {
			return false, fmt.Errorf("set results of %s: result for %s", uid, r.ResourceUID)
		}
		if p, ok := prev[key{r.Policy, r.Rule}]; ok && p.Result == r.Result && p.Message == r.Message && p.Digest == r.Digest {
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

func containsString(list []string, s string) bool {
	i := sort.SearchStrings(list, s)
	return i < len(list) && list[i] == s
}
