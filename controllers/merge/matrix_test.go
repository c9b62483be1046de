package merge

import (
	"reflect"
	"sort"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
)

func res(policy, rule string, r wgv1alpha2.Result, at int64) wgv1alpha2.PolicyReportResult {
	return wgv1alpha2.PolicyReportResult{Policy: policy, Rule: rule, Result: r, Scored: true, Timestamp: metav1.Timestamp{Seconds: at}}
}

func pol(background, admission bool, rules ...string) PolicyInfo {
	p := PolicyInfo{Background: background, Admission: admission, Scored: true, Rules: map[string]bool{}}
	for _, r := range rules {
		p.Rules[r] = true
	}
	return p
}

const (
	pass = wgv1alpha2.ResultPass
	fail = wgv1alpha2.ResultFail
	warn = wgv1alpha2.ResultWarn
)

func TestMerge(t *testing.T) {
	tests := map[string]struct {
		in   Input
		want []string // "policy/rule=result"
	}{
		// The matrix (R07-R10). An Enforce failure at admission never reaches
		// an AdmissionReport (R11): only the passes of Enforce rules do.
		"R07 background on, Enforce: a new resource reports its passes": {
			in:   Input{Admission: []wgv1alpha2.PolicyReportResult{res("p", "r", pass, 10)}, Policies: map[string]PolicyInfo{"p": pol(true, true, "r")}},
			want: []string{"p/r=pass"},
		},
		"R07 background on, Enforce: an existing resource reports its failures": {
			in:   Input{Background: []wgv1alpha2.PolicyReportResult{res("p", "r", fail, 10)}, Policies: map[string]PolicyInfo{"p": pol(true, true, "r")}},
			want: []string{"p/r=fail"},
		},
		"R08 background on, Audit: a new resource reports its failures": {
			in:   Input{Admission: []wgv1alpha2.PolicyReportResult{res("p", "r", fail, 10)}, Policies: map[string]PolicyInfo{"p": pol(true, true, "r")}},
			want: []string{"p/r=fail"},
		},
		"R08 background on, Audit: an existing resource reports": {
			in:   Input{Background: []wgv1alpha2.PolicyReportResult{res("p", "r", fail, 10)}, Policies: map[string]PolicyInfo{"p": pol(true, true, "r")}},
			want: []string{"p/r=fail"},
		},
		"R09 background off, Enforce: an existing resource reports nothing": {
			in:   Input{Background: []wgv1alpha2.PolicyReportResult{res("p", "r", fail, 10)}, Policies: map[string]PolicyInfo{"p": pol(false, true, "r")}},
			want: nil,
		},
		"R10 background off, Audit: a new resource reports": {
			in:   Input{Admission: []wgv1alpha2.PolicyReportResult{res("p", "r", fail, 10)}, Policies: map[string]PolicyInfo{"p": pol(false, true, "r")}},
			want: []string{"p/r=fail"},
		},
		"R10 background off, Audit: stale background results of an existing resource are dropped": {
			in:   Input{Background: []wgv1alpha2.PolicyReportResult{res("p", "r", fail, 10)}, Policies: map[string]PolicyInfo{"p": pol(false, true, "r")}},
			want: nil,
		},
		"R13 admission off: admission results are dropped": {
			in:   Input{Admission: []wgv1alpha2.PolicyReportResult{res("p", "r", fail, 10)}, Policies: map[string]PolicyInfo{"p": pol(true, false, "r")}},
			want: nil,
		},
		"R45 beside Kyverno, a mutate rule's admission result stays, though tally's scan never reports it": {
			in: Input{Admission: []wgv1alpha2.PolicyReportResult{res("p", "add-label", pass, 10), res("p", "autogen-add-label", pass, 10), res("p", "r", pass, 10)},
				Background: []wgv1alpha2.PolicyReportResult{res("p", "r", fail, 20)}, BackgroundCurrent: true,
				Policies: map[string]PolicyInfo{"p": func() PolicyInfo {
					p := pol(true, true, "r")
					p.KyvernoOnly = map[string]bool{"add-label": true, "autogen-add-label": true}
					return p
				}()}},
			want: []string{"p/add-label=pass", "p/autogen-add-label=pass", "p/r=fail"},
		},
		"R45 a rule tally does not evaluate goes with its policy's rule": {
			in:   Input{Admission: []wgv1alpha2.PolicyReportResult{res("p", "add-label", pass, 10)}, Policies: map[string]PolicyInfo{"p": pol(true, true, "r")}},
			want: nil,
		},
		"R19 results of a deleted policy go": {
			in: Input{Background: []wgv1alpha2.PolicyReportResult{res("gone", "r", fail, 10), res("p", "r", pass, 10)},
				Policies: map[string]PolicyInfo{"p": pol(true, true, "r")}},
			want: []string{"p/r=pass"},
		},
		"R19 results of a removed rule go": {
			in: Input{Admission: []wgv1alpha2.PolicyReportResult{res("p", "old", fail, 10), res("p", "r", pass, 10)},
				Policies: map[string]PolicyInfo{"p": pol(true, true, "r")}},
			want: []string{"p/r=pass"},
		},
		"R19 an admission result for a rule the current scan no longer matches goes": {
			in: Input{
				Admission:         []wgv1alpha2.PolicyReportResult{res("p", "a", fail, 20), res("p", "b", pass, 20)},
				Background:        []wgv1alpha2.PolicyReportResult{res("p", "b", pass, 30)},
				BackgroundCurrent: true,
				Policies:          map[string]PolicyInfo{"p": pol(true, true, "a", "b")},
			},
			want: []string{"p/b=pass"},
		},
		"R20 a newer admission result wins over the background one": {
			in: Input{
				Admission:  []wgv1alpha2.PolicyReportResult{res("p", "r", pass, 20)},
				Background: []wgv1alpha2.PolicyReportResult{res("p", "r", fail, 10)},
				Policies:   map[string]PolicyInfo{"p": pol(true, true, "r")},
			},
			want: []string{"p/r=pass"},
		},
		"R20 a newer background result wins over the admission one": {
			in: Input{
				Admission:  []wgv1alpha2.PolicyReportResult{res("p", "r", pass, 10)},
				Background: []wgv1alpha2.PolicyReportResult{res("p", "r", fail, 20)},
				Policies:   map[string]PolicyInfo{"p": pol(true, true, "r")},
			},
			want: []string{"p/r=fail"},
		},
		"R20 on a tie the background result wins": {
			in: Input{
				Admission:  []wgv1alpha2.PolicyReportResult{res("p", "r", pass, 10)},
				Background: []wgv1alpha2.PolicyReportResult{res("p", "r", fail, 10)},
				Policies:   map[string]PolicyInfo{"p": pol(true, true, "r")},
			},
			want: []string{"p/r=fail"},
		},
		"R15 every matching rule of every policy has its own entry": {
			in: Input{
				Admission:  []wgv1alpha2.PolicyReportResult{res("q", "x", pass, 10)},
				Background: []wgv1alpha2.PolicyReportResult{res("p", "a", fail, 10), res("p", "b", fail, 10)},
				Policies:   map[string]PolicyInfo{"p": pol(true, true, "a", "b"), "q": pol(false, true, "x")},
			},
			want: []string{"p/a=fail", "p/b=fail", "q/x=pass"},
		},
		"R24 a failure of an unscored policy is a warning": {
			in: Input{Background: []wgv1alpha2.PolicyReportResult{res("p", "r", fail, 10)},
				Policies: map[string]PolicyInfo{"p": func() PolicyInfo { p := pol(true, true, "r"); p.Scored = false; return p }()}},
			want: []string{"p/r=warn"},
		},
		"R27 a policy with reports disabled has no entries": {
			in: Input{Background: []wgv1alpha2.PolicyReportResult{res("p", "r", fail, 10)},
				Policies: map[string]PolicyInfo{"p": func() PolicyInfo { p := pol(true, true, "r"); p.ReportsDisabled = true; return p }()}},
			want: nil,
		},
		"R27 results outside --allowed-results are dropped": {
			in: Input{Background: []wgv1alpha2.PolicyReportResult{res("p", "a", fail, 10), res("p", "b", pass, 10)},
				Policies: map[string]PolicyInfo{"p": pol(true, true, "a", "b")},
				Filter:   Filter{AllowedResults: map[wgv1alpha2.Result]bool{fail: true, warn: true}}},
			want: []string{"p/a=fail"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var got []string
			for _, r := range Merge(tc.in) {
				got = append(got, r.Policy+"/"+r.Rule+"="+string(r.Result))
			}
			if !sort.StringsAreSorted(got) {
				t.Errorf("results not sorted: %v", got)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
