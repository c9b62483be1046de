package memstore

import (
	"fmt"
	"testing"
	"time"
)

func newStore(t testing.TB) *Store {
	t.Helper()
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func pod(uid, ns, name string, _ map[string]string) *Resource {
	return NewResource(uid, "", "v1", "Pod", ns, name, "1", 0, []byte(`{"apiVersion":"v1","kind":"Pod"}`))
}

func TestResourceIndexes(t *testing.T) {
	s := newStore(t)
	err := s.Write(func(w *WriteTxn) error {
		for _, r := range []*Resource{
			pod("u1", "a", "p1", map[string]string{"app": "web"}),
			pod("u2", "a", "p2", map[string]string{"app": "db"}),
			pod("u3", "b", "p3", map[string]string{"app": "web"}),
			{UID: "u4", Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "a", Name: "d"},
		} {
			if err := w.PutResource(r); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	r := s.Read()
	tests := map[string]struct {
		read func() ([]*Resource, error)
		want int
	}{
		"pods of every namespace":     {func() ([]*Resource, error) { return r.ResourcesOfKind("", "Pod", "") }, 3},
		"pods of one namespace":       {func() ([]*Resource, error) { return r.ResourcesOfKind("", "Pod", "a") }, 2},
		"deployments are apart":       {func() ([]*Resource, error) { return r.ResourcesOfKind("apps", "Deployment", "") }, 1},
		"a kind prefix does not leak": {func() ([]*Resource, error) { return r.ResourcesOfKind("", "Po", "") }, 0},
		"by namespace":                {func() ([]*Resource, error) { return r.ResourcesInNamespace("a") }, 3},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := tc.read()
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tc.want {
				t.Errorf("got %d resources, want %d", len(got), tc.want)
			}
		})
	}
}

func result(policy, rule, outcome string, at time.Time) Result {
	return NewResult(Entry{Policy: policy, Rule: rule, Result: outcome, Message: outcome}, at)
}

func TestReplaceResults(t *testing.T) {
	s := newStore(t)
	t0, t1 := time.Unix(100, 0), time.Unix(200, 0)
	replace := func(uid, policy string, rs ...Result) bool {
		t.Helper()
		var changed bool
		if err := s.Write(func(w *WriteTxn) (err error) {
			changed, err = w.ReplaceResults(uid, policy, rs)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return changed
	}
	if !replace("u1", "p", result("p", "r1", "pass", t0), result("p", "r2", "fail", t0)) {
		t.Error("first results reported no change")
	}
	replace("u1", "q", result("q", "r1", "pass", t0))
	if replace("u1", "p", result("p", "r1", "pass", t1), result("p", "r2", "fail", t1)) {
		t.Error("identical results reported a change")
	}
	got, _ := s.Read().Results("u1")
	if len(got) != 3 || !got[0].ChangedAt().Equal(t0) {
		t.Fatalf("unchanged results must keep their first time: %+v", got)
	}
	if !replace("u1", "p", result("p", "r1", "fail", t1)) {
		t.Error("a changed result and a removed one reported no change")
	}
	got, _ = s.Read().Results("u1")
	want := []string{"p/r1/fail", "q/r1/pass"}
	if len(got) != len(want) {
		t.Fatalf("got %d results, want %v", len(got), want)
	}
	for i, r := range got {
		if s := fmt.Sprintf("%s/%s/%s", r.Value().Policy, r.Value().Rule, r.Value().Result); s != want[i] {
			t.Errorf("result %d = %s, want %s", i, s, want[i])
		}
	}
	if err := s.Write(func(w *WriteTxn) error {
		_, err := w.ReplaceResults("u1", "p", []Result{result("q", "r", "pass", t0)})
		return err
	}); err == nil {
		t.Error("a result of another policy was accepted")
	}
}

func TestDeletesCascade(t *testing.T) {
	s := newStore(t)
	err := s.Write(func(w *WriteTxn) error {
		for _, uid := range []string{"u1", "u2"} {
			if err := w.PutResource(pod(uid, "a", uid, nil)); err != nil {
				return err
			}
			for _, p := range []string{"p", "q"} {
				if _, err := w.ReplaceResults(uid, p, []Result{result(p, "r", "pass", time.Time{})}); err != nil {
					return err
				}
			}
		}
		if err := w.PutPolicy(&Policy{Name: "p"}); err != nil {
			return err
		}
		return w.SetLastScan("p", time.Unix(5, 0))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Write(func(w *WriteTxn) error { return w.DeleteResource("u1") }); err != nil {
		t.Fatal(err)
	}
	if rs, _ := s.Read().Results("u1"); len(rs) != 0 {
		t.Errorf("results of a deleted resource remain: %d", len(rs))
	}
	if err := s.Write(func(w *WriteTxn) error { return w.DeletePolicy("p") }); err != nil {
		t.Fatal(err)
	}
	r := s.Read()
	if rs, _ := r.ResultsOfPolicy("p"); len(rs) != 0 {
		t.Errorf("results of a deleted policy remain: %d", len(rs))
	}
	if rs, _ := r.ResultsOfPolicy("q"); len(rs) != 1 {
		t.Errorf("results of another policy went too: %d left, want 1", len(rs))
	}
	if last, _ := r.LastScan("p"); !last.IsZero() {
		t.Errorf("scan state of a deleted policy remains: %v", last)
	}
}

func TestSetResultsReplacesEveryPolicy(t *testing.T) {
	s := newStore(t)
	t0, t1 := time.Unix(100, 0), time.Unix(200, 0)
	set := func(rs ...Result) bool {
		t.Helper()
		var changed bool
		if err := s.Write(func(w *WriteTxn) (err error) { changed, err = w.SetResults("u1", rs); return err }); err != nil {
			t.Fatal(err)
		}
		return changed
	}
	if !set(result("p", "r", "pass", t0), result("q", "r", "fail", t0)) {
		t.Error("first results reported no change")
	}
	if set(result("q", "r", "fail", t1), result("p", "r", "pass", t1)) {
		t.Error("the same results in another order reported a change")
	}
	if !set(result("p", "r", "pass", t1)) {
		t.Error("dropping a policy's results reported no change")
	}
	got, _ := s.Read().Results("u1")
	if len(got) != 1 || got[0].Value().Policy != "p" || !got[0].ChangedAt().Equal(t0) {
		t.Errorf("got %+v, want only p/r with its first time", got)
	}
	if rs, _ := s.Read().ResultsOfPolicy("q"); len(rs) != 0 {
		t.Errorf("the policy index still finds q: %d", len(rs))
	}
}

// A ClusterPolicy and a ValidatingPolicy of the same report name are two
// policies: each one's results are its own (by source), through reads and
// deletion.
func TestPoliciesOfOneNameAndTwoSources(t *testing.T) {
	s := newStore(t)
	classic := NewResult(Entry{Source: "kyverno", Policy: "x", Rule: "r", Result: "fail"}, time.Time{})
	cel := NewResult(Entry{Source: "KyvernoValidatingPolicy", Policy: "x", Rule: "", Result: "pass"}, time.Time{})
	err := s.Write(func(w *WriteTxn) error {
		if err := w.PutResource(pod("u1", "a", "u1", nil)); err != nil {
			return err
		}
		if _, err := w.SetResults("u1", []Result{classic, cel}); err != nil {
			return err
		}
		if err := w.PutPolicy(&Policy{Name: "x", ReportName: "x", Source: "kyverno"}); err != nil {
			return err
		}
		return w.PutPolicy(&Policy{Name: "ValidatingPolicy/x", ReportName: "x", Source: "KyvernoValidatingPolicy"})
	})
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"x": "fail", "ValidatingPolicy/x": "pass"} {
		rs, _ := s.Read().ResultsOfPolicy(key)
		if len(rs) != 1 || rs[0].Result.Value().Result != want {
			t.Errorf("results of %s: %+v, want one %s", key, rs, want)
		}
	}
	if err := s.Write(func(w *WriteTxn) error { return w.DeletePolicy("ValidatingPolicy/x") }); err != nil {
		t.Fatal(err)
	}
	rs, _ := s.Read().Results("u1")
	if len(rs) != 1 || rs[0].Value().Source != "kyverno" {
		t.Errorf("after deleting the ValidatingPolicy: %+v, want the ClusterPolicy's result alone", rs)
	}
}

// Two scans that end in the other order leave the later time: a forced
// rescan is not undone by the back-dated first scan of a new policy.
func TestLastScanNeverGoesBack(t *testing.T) {
	s := newStore(t)
	later, earlier := time.Unix(2000, 0), time.Unix(1000, 0)
	for _, at := range []time.Time{later, earlier} {
		if err := s.Write(func(w *WriteTxn) error { return w.SetLastScan("p", at) }); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Read().LastScan("p")
	if err != nil {
		t.Fatal(err)
	}
	if !got.Equal(later) {
		t.Errorf("last scan %v, want %v", got, later)
	}
}
