package main

import (
	"flag"
	"strings"
	"testing"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/report"
)

// The flags parse into the merge options they name, completed by check;
// values that cannot work are refused, each named.
func TestFlags(t *testing.T) {
	tests := map[string]struct {
		args []string
		want string // a substring of the error; "" accepts
	}{
		"defaults":                  {nil, ""},
		"beside Kyverno":            {[]string{"--managed-by=kyverno", "--ingest-kyverno-reports", "--leader-elect=false"}, ""},
		"OpenReports":               {[]string{"--report-api=openreports"}, ""},
		"a result unknown":          {[]string{"--allowed-results=pass,maybe"}, `"maybe" is not one of`},
		"a report API unknown":      {[]string{"--report-api=v9"}, "--report-api"},
		"not a label value":         {[]string{"--managed-by="}, "--managed-by"},
		"a negative grace":          {[]string{"--orphan-grace=-1s"}, "must not be negative"},
		"no worker":                 {[]string{"--workers=0"}, "--workers 0"},
		"a scanner URL without one": {[]string{"--scanner-url=127.0.0.1:8095"}, "--scanner-url"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			fs := flag.NewFlagSet("tally-merger", flag.ContinueOnError)
			c := bindFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := c.check()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
	fs := flag.NewFlagSet("tally-merger", flag.ContinueOnError)
	c := bindFlags(fs)
	if err := fs.Parse([]string{"--allowed-results=fail, warn", "--report-api=openreports", "--workers=3"}); err != nil {
		t.Fatal(err)
	}
	if err := c.check(); err != nil {
		t.Fatal(err)
	}
	if !c.Merge.Filter.AllowedResults[wgv1alpha2.ResultFail] || !c.Merge.Filter.AllowedResults[wgv1alpha2.ResultWarn] || c.Merge.Filter.AllowedResults[wgv1alpha2.ResultPass] {
		t.Errorf("filter %v, want fail and warn", c.Merge.Filter.AllowedResults)
	}
	if c.Merge.ReportAPI != report.APIOpenReports || c.Merge.Workers != 3 {
		t.Errorf("options %+v do not hold the flags given", c.Merge)
	}
}

// The defaults are the topology the chart ships: the merger beside its
// scanner in one Pod, on its own port, without a Lease of its own.
func TestDefaultsAreTheShippedTopology(t *testing.T) {
	fs := flag.NewFlagSet("tally-merger", flag.ContinueOnError)
	c := bindFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if c.Options.Listen != ":8081" || c.Options.LeaderElect || c.ScannerURL != "http://127.0.0.1:8095" {
		t.Errorf("defaults: listen %q, leader election %v, scanner %q; want the chart's: :8081, false, http://127.0.0.1:8095",
			c.Options.Listen, c.Options.LeaderElect, c.ScannerURL)
	}
	if f := fs.Lookup("leader-elect"); f.DefValue != "false" {
		t.Errorf("--help shows --leader-elect defaulting to %s, want false", f.DefValue)
	}
}
