package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	kyvernov2 "github.com/tally-dev/tally/api/kyverno/v2"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
)

// expect waits until every expectation of a step holds (at most Timeout),
// then checks that they keep holding for Settle: an absence proves nothing
// at the first look, and a report that must stay unchanged must not be
// rewritten a moment later.
func (x *run) expect(ctx context.Context, then Then, before map[Ref]string) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, x.Timeout, true, func(ctx context.Context) (bool, error) {
		err := x.check(ctx, then, before)
		deadline := ctx.Err() != nil || err != nil && strings.Contains(err.Error(), "rate limiter Wait")
		if err != nil && deadline && last != nil {
			return false, nil // keep the last real reason, not the deadline's
		}
		last = err
		return last == nil, nil
	})
	if err != nil {
		if last == nil {
			last = err
		}
		return fmt.Errorf("after %s: %w", x.Timeout, last)
	}
	x.held = time.Now()
	deadline := time.Now().Add(x.Settle)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
		if err := x.check(ctx, then, before); err != nil {
			return fmt.Errorf("held, then stopped holding within %s: %w", x.Settle, err)
		}
	}
	return nil
}

func (x *run) check(ctx context.Context, then Then, before map[Ref]string) error {
	var errs []error
	for _, e := range then.Reports {
		if !x.can(e.Needs) {
			continue
		}
		if err := x.checkReport(ctx, e); err != nil {
			errs = append(errs, fmt.Errorf("report of %s: %w", e.For, err))
		}
	}
	for _, e := range then.Intermediate {
		if err := x.checkIntermediate(ctx, e); err != nil {
			errs = append(errs, fmt.Errorf("%s of %s: %w", e.Kind, e.For, err))
		}
	}
	for _, e := range then.Objects {
		if !x.can(e.Needs) {
			continue
		}
		if err := x.checkObject(ctx, e); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", e.For, err))
		}
	}
	for _, e := range then.Events {
		if err := x.checkEvent(ctx, e); err != nil {
			errs = append(errs, fmt.Errorf("event %s about %s: %w", e.Reason, e.For, err))
		}
	}
	for _, e := range then.Counts {
		if err := x.checkCount(ctx, e); err != nil {
			errs = append(errs, fmt.Errorf("reports of %s with %s/%s=%s: %w", e.Namespace, e.Policy, e.Rule, e.Result, err))
		}
	}
	for _, e := range then.Metrics {
		if !x.can(e.Needs) {
			continue
		}
		if err := x.checkMetric(ctx, e); err != nil {
			errs = append(errs, fmt.Errorf("metric %s%v of the %s: %w", e.Name, e.Labels, e.Component, err))
		}
	}
	for _, e := range then.Clients {
		if err := x.checkClient(ctx, e); err != nil {
			errs = append(errs, fmt.Errorf("%s of %s: %w", e.Client, e.Namespace, err))
		}
	}
	for ref, rv := range before {
		rep, err := x.finalReport(ctx, ref)
		switch {
		case err != nil:
			errs = append(errs, err)
		case rep == nil:
			errs = append(errs, fmt.Errorf("report of %s: gone, must stay unchanged", ref))
		case rep.GetResourceVersion() != rv:
			errs = append(errs, fmt.Errorf("report of %s: rewritten (resourceVersion %s -> %s), must stay unchanged", ref, rv, rep.GetResourceVersion()))
		}
	}
	return errors.Join(errs...)
}

func (x *run) checkReport(ctx context.Context, e ReportExpectation) error {
	u, err := x.finalReport(ctx, e.For)
	if err != nil {
		return err
	}
	if u == nil {
		if e.Absent {
			return nil
		}
		for _, r := range e.Results {
			if !r.Absent {
				return errors.New("no report")
			}
		}
		return nil // only absences expected, and there is nothing at all
	}
	if e.Absent {
		return fmt.Errorf("a report exists (%d results), none expected", len(resultsOf(u)))
	}
	var rep wgv1alpha2.PolicyReport // both kinds have the same results and summary
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &rep); err != nil {
		return fmt.Errorf("unreadable report: %w", err)
	}
	if err := checkReportShape(u, &rep); err != nil {
		return err
	}
	if st, ok := x.Provider.(ReportStore); ok {
		if key, want := st.StoredBy(); key != "" && u.GetAnnotations()[key] != want {
			return fmt.Errorf("annotation %s = %q, want %q: the report is not stored where the provider puts reports", key, u.GetAnnotations()[key], want)
		}
	}
	if lp, ok := x.Provider.(ManagedByLabeler); ok {
		if got, want := u.GetLabels()["app.kubernetes.io/managed-by"], lp.ManagedBy(); got != want {
			return fmt.Errorf("label app.kubernetes.io/managed-by = %q, want %q (R15; beside Kyverno, Kyverno's tooling selects reports by kyverno)", got, want)
		}
	}
	if e.Summary != nil {
		got := map[string]int{"pass": rep.Summary.Pass, "fail": rep.Summary.Fail, "warn": rep.Summary.Warn, "error": rep.Summary.Error, "skip": rep.Summary.Skip}
		for k, v := range e.Summary {
			if got[k] != v {
				return fmt.Errorf("summary %v, want %v", got, e.Summary)
			}
		}
	}
	used := make([]bool, len(rep.Results))
	positive := 0
	for _, want := range e.Results {
		if want.Absent {
			for _, r := range rep.Results {
				if r.Policy == want.Policy && (want.Rule == "" || r.Rule == want.Rule) {
					return fmt.Errorf("entry %s/%s (%s) present, none expected", r.Policy, r.Rule, r.Result)
				}
			}
			continue
		}
		positive++
		found := false
		var near []string
		for i, r := range rep.Results {
			if used[i] || r.Policy != want.Policy || (want.Rule != "" && r.Rule != want.Rule) {
				continue
			}
			if why := want.mismatch(r); why != "" {
				near = append(near, why)
				continue
			}
			used[i], found = true, true
			break
		}
		if !found {
			if len(near) > 0 {
				return fmt.Errorf("entry %s/%s: %s", want.Policy, want.Rule, strings.Join(near, "; "))
			}
			return fmt.Errorf("no entry for %s/%s; entries: %s", want.Policy, want.Rule, describe(rep.Results))
		}
	}
	if e.Exact && len(rep.Results) != positive {
		return fmt.Errorf("%d entries, want exactly %d: %s", len(rep.Results), positive, describe(rep.Results))
	}
	return nil
}

// checkReportShape checks what every final report must have: the summary
// counts its results (R18), each result is timestamped and sourced (R16),
// and the report names and owns its resource (R15).
func checkReportShape(u *unstructured.Unstructured, rep *wgv1alpha2.PolicyReport) error {
	counts := map[wgv1alpha2.Result]int{}
	for _, r := range rep.Results {
		counts[r.Result]++
		if r.Timestamp.Seconds == 0 {
			return fmt.Errorf("entry %s/%s has no timestamp", r.Policy, r.Rule)
		}
	}
	s := rep.Summary
	if s.Pass != counts[wgv1alpha2.ResultPass] || s.Fail != counts[wgv1alpha2.ResultFail] || s.Warn != counts[wgv1alpha2.ResultWarn] ||
		s.Error != counts[wgv1alpha2.ResultError] || s.Skip != counts[wgv1alpha2.ResultSkip] {
		return fmt.Errorf("summary %+v does not count the results %v (R18)", s, counts)
	}
	if rep.Scope == nil || string(rep.Scope.UID) != u.GetName() {
		return fmt.Errorf("scope %+v does not name the resource UID %s (R15)", rep.Scope, u.GetName())
	}
	if u.GetLabels()["app.kubernetes.io/managed-by"] == "" {
		return errors.New("label app.kubernetes.io/managed-by missing (R15)")
	}
	owners := u.GetOwnerReferences()
	if len(owners) != 1 || string(owners[0].UID) != u.GetName() {
		return fmt.Errorf("ownerReferences %+v: want one, to the resource (R15)", owners)
	}
	return nil
}

func resultsOf(u *unstructured.Unstructured) []any {
	r, _, _ := unstructured.NestedSlice(u.Object, "results")
	return r
}

func describe(results []wgv1alpha2.PolicyReportResult) string {
	if len(results) == 0 {
		return "(none)"
	}
	parts := make([]string, len(results))
	for i, r := range results {
		parts[i] = fmt.Sprintf("%s/%s=%s %q", r.Policy, r.Rule, r.Result, r.Message)
	}
	return strings.Join(parts, ", ")
}

// mismatch says why an entry does not match, or "" if it does.
func (want ResultExpectation) mismatch(r wgv1alpha2.PolicyReportResult) string {
	switch {
	case want.Result != "" && string(r.Result) != want.Result:
		return fmt.Sprintf("result %s, want %s (%q)", r.Result, want.Result, r.Message)
	case want.Message != nil && r.Message != *want.Message:
		return fmt.Sprintf("message %q, want %q", r.Message, *want.Message)
	case want.MessageContains != "" && !strings.Contains(r.Message, want.MessageContains):
		return fmt.Sprintf("message %q does not contain %q", r.Message, want.MessageContains)
	case want.Scored != nil && r.Scored != *want.Scored:
		return fmt.Sprintf("scored %v, want %v", r.Scored, *want.Scored)
	case want.Source != "" && r.Source != want.Source:
		return fmt.Sprintf("source %q, want %q", r.Source, want.Source)
	case want.Category != nil && r.Category != *want.Category:
		return fmt.Sprintf("category %q, want %q", r.Category, *want.Category)
	case want.Severity != nil && string(r.Severity) != *want.Severity:
		return fmt.Sprintf("severity %q, want %q", r.Severity, *want.Severity)
	}
	for k, v := range want.Properties {
		if got, ok := r.Properties[k]; !ok || got != v {
			return fmt.Sprintf("properties[%s] = %q, want %q", k, got, v)
		}
	}
	for _, part := range want.MessageContainsAll {
		if !strings.Contains(r.Message, part) {
			return fmt.Sprintf("message %q does not contain %q", r.Message, part)
		}
	}
	for _, part := range want.MessageExcludes {
		if strings.Contains(r.Message, part) {
			return fmt.Sprintf("message %q contains %q", r.Message, part)
		}
	}
	return ""
}

func (x *run) checkIntermediate(ctx context.Context, e IntermediateExpectation) error {
	uid, namespaced, err := x.uidOf(ctx, e.For)
	if err != nil {
		return err
	}
	if uid == "" {
		if e.Count == 0 {
			return nil
		}
		return errors.New("the resource does not exist")
	}
	resource := map[string]string{"AdmissionReport": "admissionreports", "BackgroundScanReport": "backgroundscanreports"}[e.Kind]
	gvr := kyvernov2.GroupVersion.WithResource(resource)
	opts := metav1.ListOptions{LabelSelector: labelResourceUID + "=" + string(uid)}
	var list *unstructured.UnstructuredList
	if namespaced && e.For.Namespace != "" {
		list, err = x.dyn.Resource(gvr).Namespace(e.For.Namespace).List(ctx, opts)
	} else {
		gvr.Resource = "cluster" + gvr.Resource
		list, err = x.dyn.Resource(gvr).List(ctx, opts)
	}
	if apierrors.IsNotFound(err) {
		// The kind is not served (tally installs no BackgroundScanReport
		// CRD): none of it can exist.
		list, err = &unstructured.UnstructuredList{}, nil
	}
	if err != nil {
		return err
	}
	if len(list.Items) != e.Count {
		return fmt.Errorf("%d found, want %d", len(list.Items), e.Count)
	}
	return nil
}

func (x *run) checkObject(ctx context.Context, e ObjectExpectation) error {
	u, err := x.get(ctx, e.For)
	if apierrors.IsNotFound(err) {
		if e.Exists != nil && !*e.Exists {
			return nil
		}
		return errors.New("does not exist")
	}
	if err != nil {
		return err
	}
	if e.Exists != nil && !*e.Exists {
		return errors.New("exists, must not")
	}
	labels := u.GetLabels()
	for k, v := range e.Labels {
		if got, ok := labels[k]; !ok || got != v {
			return fmt.Errorf("label %s = %q, want %q", k, got, v)
		}
	}
	for _, k := range e.LabelsAbsent {
		if _, ok := labels[k]; ok {
			return fmt.Errorf("label %s present, must be absent", k)
		}
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, statusPath(u, "conditions")...)
	for typ, want := range e.Conditions {
		got := "(none)"
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == typ {
				got, _ = m["status"].(string)
			}
		}
		if got != want {
			return fmt.Errorf("condition %s is %s, want %s", typ, got, want)
		}
	}
	return nil
}

// can reports whether the provider offers every capability of needs.
func (x *run) can(needs []string) bool {
	for _, n := range needs {
		if !x.Provider.Can(n) {
			return false
		}
	}
	return true
}

func (x *run) checkMetric(ctx context.Context, e MetricExpectation) error {
	src, ok := x.Provider.(MetricsSource)
	if !ok {
		return ErrUnsupported
	}
	text, err := src.Metrics(ctx, e.Component)
	if err != nil {
		return err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		return fmt.Errorf("unreadable metrics: %w", err)
	}
	fam, ok := families[e.Name]
	if !ok {
		return errors.New("no such metric")
	}
	for _, m := range fam.GetMetric() {
		labels := map[string]string{}
		for _, lp := range m.GetLabel() {
			labels[lp.GetName()] = lp.GetValue()
		}
		match := true
		for k, v := range e.Labels {
			if labels[k] != v {
				match = false
			}
		}
		if !match {
			continue
		}
		var v float64
		switch {
		case m.Gauge != nil:
			v = m.GetGauge().GetValue()
		case m.Counter != nil:
			v = m.GetCounter().GetValue()
		case m.Histogram != nil:
			v = float64(m.GetHistogram().GetSampleCount())
		case m.Untyped != nil:
			v = m.GetUntyped().GetValue()
		}
		if e.Min != nil && v < *e.Min || e.Max != nil && v > *e.Max {
			return fmt.Errorf("value %v outside [%v, %v]", v, deref(e.Min), deref(e.Max))
		}
		return nil
	}
	return errors.New("no series with these labels")
}

func deref(f *float64) any {
	if f == nil {
		return "-"
	}
	return *f
}

func (x *run) checkEvent(ctx context.Context, e EventExpectation) error {
	sel := "involvedObject.kind=" + e.For.Kind + ",involvedObject.name=" + e.For.Name
	list, err := x.kube.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return err
	}
	var seen []string
	for _, ev := range list.Items {
		if e.For.Namespace != "" && ev.InvolvedObject.Namespace != e.For.Namespace {
			continue
		}
		if ev.Reason == e.Reason && strings.Contains(ev.Message, e.MessageContains) &&
			(e.Action == "" || ev.Action == e.Action && !ev.EventTime.IsZero()) &&
			(e.ReportingController == "" || ev.ReportingController == e.ReportingController) {
			return nil
		}
		seen = append(seen, fmt.Sprintf("%s [%s, %s, eventTime %v]: %s", ev.Reason, ev.Action, ev.ReportingController, !ev.EventTime.IsZero(), ev.Message))
	}
	return fmt.Errorf("none; events seen: %q", seen)
}

func (x *run) checkCount(ctx context.Context, e CountExpectation) error {
	list, err := x.dyn.Resource(x.reportAPI().FinalGVR(e.Namespace)).Namespace(e.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	n := 0
	for _, u := range list.Items {
		var rep wgv1alpha2.PolicyReport
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &rep); err != nil {
			return fmt.Errorf("unreadable report %s: %w", u.GetName(), err)
		}
		seen := map[string]bool{}
		for _, r := range rep.Results {
			key := r.Policy + "/" + r.Rule
			if seen[key] {
				return fmt.Errorf("report %s holds %s twice", u.GetName(), key)
			}
			seen[key] = true
			if r.Policy == e.Policy && (e.Rule == "" || r.Rule == e.Rule) && string(r.Result) == e.Result {
				n++
			}
		}
	}
	if n != e.Reports {
		return fmt.Errorf("%d found, want %d", n, e.Reports)
	}
	return nil
}
