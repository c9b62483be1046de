package memstore

import "fmt"

// Results returns a resource's results, ordered by policy and rule.
func (r *ReadTxn) Results(uid string) ([]*Result, error) {
	out, err := all[*Result](r.txn, tableResults, indexID+"_prefix", uid)
	if err != nil {
		return nil, fmt.Errorf("results of %s: %w", uid, err)
	}
	return out, nil
}

// ResultsOfPolicy returns every result of a policy.
func (r *ReadTxn) ResultsOfPolicy(policy string) ([]*Result, error) {
	out, err := all[*Result](r.txn, tableResults, indexPolicy, policy)
	if err != nil {
		return nil, fmt.Errorf("results of policy %s: %w", policy, err)
	}
	return out, nil
}

// CountResults counts results with an outcome ("pass", "fail", ...).
func (r *ReadTxn) CountResults(outcome string) (int, error) {
	return count(r.txn, tableResults, indexResultOutcome, outcome)
}

// ReplaceResults makes results the whole result set of (resource, policy):
// entries not in it go, so results that no longer apply vanish. A result
// whose outcome, message and digest are unchanged keeps its stored value (and so its
// Changed time). It reports whether anything changed.
func (w *WriteTxn) ReplaceResults(uid, policy string, results []*Result) (bool, error) {
	old, err := all[*Result](w.txn, tableResults, indexID+"_prefix", uid, policy)
	if err != nil {
		return false, fmt.Errorf("replace results of %s/%s: %w", uid, policy, err)
	}
	byRule := make(map[string]*Result, len(old))
	for _, r := range old {
		byRule[r.Rule] = r
	}
	changed := false
	for _, r := range results {
		if r.ResourceUID != uid || r.Policy != policy {
			return false, fmt.Errorf("replace results of %s/%s: result for %s/%s", uid, policy, r.ResourceUID, r.Policy)
		}
		prev, ok := byRule[r.Rule]
		delete(byRule, r.Rule)
		if ok && prev.Result == r.Result && prev.Message == r.Message && prev.Digest == r.Digest {
			continue
		}
		changed = true
		if err := w.txn.Insert(tableResults, r); err != nil {
			return false, fmt.Errorf("put result %s/%s/%s: %w", uid, policy, r.Rule, err)
		}
	}
	for _, gone := range byRule {
		changed = true
		if err := w.txn.Delete(tableResults, gone); err != nil {
			return false, fmt.Errorf("delete result %s/%s/%s: %w", uid, policy, gone.Rule, err)
		}
	}
	return changed, nil
}
