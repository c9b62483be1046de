package report

import (
	"testing"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
)

func TestBindHashAndSectionsRoundTrip(t *testing.T) {
	shared := map[string]string{PropertyProcess: ProcessAdmission}
	bound := BindHash([]wgv1alpha2.PolicyReportResult{
		{Policy: "p", Rule: "a", Properties: shared},
		{Policy: "p", Rule: "b"},
	}, "h1")
	if _, ok := shared[PropertyResourceHash]; ok {
		t.Fatal("BindHash wrote into a shared Properties map")
	}
	// Results already bound keep their hash; unbound ones take the fallback.
	all := append(bound, BindHash([]wgv1alpha2.PolicyReportResult{{Policy: "p", Rule: "a"}}, "h2")...)
	all = append(all, wgv1alpha2.PolicyReportResult{Policy: "q", Rule: "a"})
	sections := Sections(all, "label")
	if len(sections) != 3 {
		t.Fatalf("%d sections, want 3 (h1, h2, label): %+v", len(sections), sections)
	}
	for i, want := range []struct {
		hash string
		n    int
	}{{"h1", 2}, {"h2", 1}, {"label", 1}} {
		if sections[i].Hash != want.hash || len(sections[i].Results) != want.n {
			t.Errorf("section %d = %s with %d results, want %s with %d", i, sections[i].Hash, len(sections[i].Results), want.hash, want.n)
		}
	}
	if got := sections[0].Results[0].Properties[PropertyProcess]; got != ProcessAdmission {
		t.Errorf("other properties lost: process = %q", got)
	}
	if one := Sections(bound, "label"); len(one) != 1 || one[0].Hash != "h1" || len(one[0].Results) != 2 {
		t.Errorf("one content: %+v", one)
	}
	if BindHash(all, "")[3].Properties != nil {
		t.Error("an empty hash bound something")
	}
}
