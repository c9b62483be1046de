package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// CanPolicyReporter: policy-reporter (kyverno/policy-reporter) runs beside
// the implementation with its REST API and metrics on (the kind runs).
const CanPolicyReporter = "policy-reporter"

// PolicyReporter is a provider that reaches policy-reporter: Get reads one
// of its paths (/v1/..., /v2/..., /metrics) with a query.
type PolicyReporter interface {
	PolicyReporterGet(ctx context.Context, path string, query url.Values) ([]byte, error)
}

// ClientExpectation: a client of the reports (policy-reporter) shows
// exactly what the final reports of Namespace hold: per report its source
// and counts (/v1/policy-reports), every result with its message, severity
// and category (/v1/namespaced-resources/results), the counts per source,
// category, status and severity (/v2/sources/categories), the status and
// severity counts per source (/v2/namespace-scoped/SOURCE/...), and one
// policy_report_result series per result (/metrics).
type ClientExpectation struct {
	Client    string `json:"client"`
	Namespace string `json:"namespace"`
}

// seen is what a client should show of a namespace's final reports.
type seen struct {
	reports    map[string]string         // report name: source and counts
	results    []string                  // one line per result
	categories map[string]map[string]int // source/category: status and severity counts
	statuses   map[string]map[string]int // source: status counts
	severities map[string]map[string]int // source: severity counts
	metrics    []string                  // one label set per result
}

// expectedView computes what policy-reporter should show of the final
// reports of namespace, from the reports themselves, as policy-reporter
// shows them: a report's source is its first result's; a result without a
// category is shown under "Other"; one without a severity counts as
// "unknown" per category, and under "" in a namespace's severity counts.
func (x *run) expectedView(ctx context.Context, namespace string) (*seen, error) {
	list, err := x.dyn.Resource(x.reportAPI().FinalGVR(namespace)).Namespace(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	s := &seen{reports: map[string]string{}, categories: map[string]map[string]int{}, statuses: map[string]map[string]int{}, severities: map[string]map[string]int{}}
	add := func(m map[string]map[string]int, key, what string) {
		if m[key] == nil {
			m[key] = map[string]int{}
		}
		m[key][what]++
	}
	for i := range list.Items {
		u := &list.Items[i]
		var rep wgv1alpha2.PolicyReport
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &rep); err != nil {
			return nil, fmt.Errorf("report %s: %w", u.GetName(), err)
		}
		if len(rep.Results) == 0 {
			continue
		}
		counts := map[string]int{}
		raw := resultsOf(u)
		for i, r := range rep.Results {
			if r.Message == "" && i < len(raw) { // OpenReports: description
				if m, ok := raw[i].(map[string]any); ok {
					r.Message, _ = m["description"].(string)
				}
			}
			counts[string(r.Result)]++
			kind, name := "", ""
			if rep.Scope != nil {
				kind, name = rep.Scope.Kind, rep.Scope.Name
			}
			sev := string(r.Severity)
			category := r.Category
			if category == "" {
				category = "Other"
			}
			s.results = append(s.results, fmt.Sprintf("%s/%s %s/%s %s severity=%q category=%q message=%q",
				kind, name, r.Policy, r.Rule, r.Result, sev, category, r.Message))
			s.metrics = append(s.metrics, fmt.Sprintf("kind=%s name=%s policy=%s rule=%s status=%s severity=%s category=%s source=%s report=%s",
				kind, name, r.Policy, r.Rule, r.Result, sev, category, r.Source, u.GetName()))
			add(s.statuses, r.Source, string(r.Result))
			add(s.severities, r.Source, sev) // "" stays "" in the namespace's severity counts
			add(s.categories, r.Source+"/"+category, string(r.Result))
			if sev == "" {
				sev = "unknown"
			}
			add(s.categories, r.Source+"/"+category, "severity:"+sev)
		}
		s.reports[u.GetName()] = fmt.Sprintf("source=%s pass=%d fail=%d warn=%d error=%d skip=%d", rep.Results[0].Source,
			counts["pass"], counts["fail"], counts["warn"], counts["error"], counts["skip"])
	}
	sort.Strings(s.results)
	sort.Strings(s.metrics)
	return s, nil
}

// checkClient compares policy-reporter's answers with the final reports.
func (x *run) checkClient(ctx context.Context, e ClientExpectation) error {
	if e.Client != "policy-reporter" {
		return fmt.Errorf("unknown client %q (known: policy-reporter)", e.Client)
	}
	pr, ok := x.Provider.(PolicyReporter)
	if !ok {
		return errors.New("the provider runs no policy-reporter")
	}
	want, err := x.expectedView(ctx, e.Namespace)
	if err != nil {
		return err
	}
	get := func(path string, into any) error {
		body, err := pr.PolicyReporterGet(ctx, path, url.Values{"namespaces": {e.Namespace}})
		if err != nil {
			return fmt.Errorf("GET %s: %w", path, err)
		}
		if into == nil {
			return nil
		}
		if err := json.Unmarshal(body, into); err != nil {
			return fmt.Errorf("GET %s: %w: %.200s", path, err, body)
		}
		return nil
	}
	var errs []error
	differ := func(what string, got, want any) {
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		if string(g) != string(w) {
			errs = append(errs, fmt.Errorf("%s: policy-reporter shows %s, the reports hold %s", what, g, w))
		}
	}

	var reports struct {
		Items []struct {
			Name, Source                  string
			Pass, Fail, Warn, Error, Skip int
		}
	}
	if err := get("/v1/policy-reports", &reports); err != nil {
		return err
	}
	gotReports := map[string]string{}
	for _, r := range reports.Items {
		gotReports[r.Name] = fmt.Sprintf("source=%s pass=%d fail=%d warn=%d error=%d skip=%d", r.Source, r.Pass, r.Fail, r.Warn, r.Error, r.Skip)
	}
	differ("/v1/policy-reports", gotReports, want.reports)

	var results struct {
		Items []struct {
			Kind, Name, Policy, Rule, Status, Severity, Category, Message string
		}
	}
	if err := get("/v1/namespaced-resources/results", &results); err != nil {
		return err
	}
	var gotResults []string
	for _, r := range results.Items {
		gotResults = append(gotResults, fmt.Sprintf("%s/%s %s/%s %s severity=%q category=%q message=%q",
			r.Kind, r.Name, r.Policy, r.Rule, r.Status, r.Severity, r.Category, r.Message))
	}
	sort.Strings(gotResults)
	differ("/v1/namespaced-resources/results", gotResults, want.results)

	var sources []struct {
		Name       string
		Categories []struct {
			Name       string
			Status     map[string]int
			Severities map[string]int
		}
	}
	if err := get("/v2/sources/categories", &sources); err != nil {
		return err
	}
	gotCategories := map[string]map[string]int{}
	for _, src := range sources {
		for _, c := range src.Categories {
			m := map[string]int{}
			for k, v := range c.Status {
				if v != 0 {
					m[k] = v
				}
			}
			for k, v := range c.Severities {
				if v != 0 {
					m["severity:"+k] = v
				}
			}
			gotCategories[src.Name+"/"+c.Name] = m
		}
	}
	differ("/v2/sources/categories", gotCategories, want.categories)

	for source := range want.statuses {
		for _, kind := range []string{"status", "severity"} {
			var counts map[string]map[string]int
			path := "/v2/namespace-scoped/" + url.PathEscape(source) + "/" + kind + "-counts"
			if err := get(path, &counts); err != nil {
				return err
			}
			got := map[string]int{}
			for k, v := range counts[e.Namespace] {
				if v != 0 {
					got[k] = v
				}
			}
			if kind == "status" {
				differ(path, got, want.statuses[source])
			} else {
				differ(path, got, want.severities[source])
			}
		}
	}

	metrics, err := pr.PolicyReporterGet(ctx, "/metrics", nil)
	if err != nil {
		return fmt.Errorf("GET /metrics: %w", err)
	}
	differ("policy_report_result", metricSeries(string(metrics), e.Namespace), want.metrics)
	return errors.Join(errs...)
}

// metricSeries reads the policy_report_result series of namespace (value
// 1) from a Prometheus text exposition, as the label lines expectedView
// writes.
func metricSeries(text, namespace string) []string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, "policy_report_result{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok || strings.TrimSpace(value) != "1" {
			continue
		}
		m := map[string]string{}
		for _, kv := range splitLabels(labels) {
			k, v, _ := strings.Cut(kv, "=")
			m[k] = strings.Trim(v, `"`)
		}
		if m["namespace"] != namespace {
			continue
		}
		out = append(out, fmt.Sprintf("kind=%s name=%s policy=%s rule=%s status=%s severity=%s category=%s source=%s report=%s",
			m["kind"], m["name"], m["policy"], m["rule"], m["status"], m["severity"], m["category"], m["source"], m["report"]))
	}
	sort.Strings(out)
	return out
}

// splitLabels splits a label list (a="x",b="y, z") at the commas outside
// quotes.
func splitLabels(s string) []string {
	var out []string
	quoted, start := false, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			quoted = !quoted
		case ',':
			if !quoted {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}
