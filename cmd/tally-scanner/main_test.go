package main

import (
	"flag"
	"strings"
	"testing"
	"time"
)

// The flags as the chart and the kustomize bases set them parse into the
// options they name; flags that cannot work together are refused, each
// named.
func TestFlags(t *testing.T) {
	tests := map[string]struct {
		args []string
		want string // a substring of the error; "" accepts
	}{
		"defaults":                     {nil, ""},
		"as the chart runs":            {[]string{"--namespace=tally-system", "--listen=:8080", "--webhook-listen=:9443", "--sharding", "--identity=tally-scanner-abc", "--pod-uid=1234", "--webhook-client-ca=/ca.crt", "--exception-namespace=platform"}, ""},
		"beside Kyverno":               {[]string{"--webhook-listen=", "--policy-status=false", "--managed-by=kyverno", "--sharding", "--pod-uid=1"}, ""},
		"every namespace's exceptions": {[]string{"--exception-namespace=*"}, ""},
		"a report API unknown":         {[]string{"--report-api=v9"}, "--report-api"},
		"a pod UID without sharding":   {[]string{"--sharding=false", "--pod-uid=1"}, "--pod-uid owns the membership Lease of --sharding"},
		"a client CA and no webhook":   {[]string{"--webhook-listen=", "--webhook-client-ca=/ca.crt"}, "--webhook-client-ca authenticates"},
		"no worker":                    {[]string{"--workers=0"}, "--workers 0"},
		"no interval":                  {[]string{"--background-scan-interval=0s"}, "must be positive"},
		"not a namespace":              {[]string{"--exception-namespace=Team_A"}, `--exception-namespace "Team_A"`},
		"not a label value":            {[]string{"--managed-by=not a label"}, `--managed-by "not a label"`},
		"two problems, both named":     {[]string{"--workers=0", "--sharding=false", "--pod-uid=1"}, "--workers 0"},
		"one leader, unsharded":        {[]string{"--sharding=false", "--leader-elect"}, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			fs := flag.NewFlagSet("tally-scanner", flag.ContinueOnError)
			o := bindFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := o.check()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
	fs := flag.NewFlagSet("tally-scanner", flag.ContinueOnError)
	o := bindFlags(fs)
	if err := fs.Parse([]string{"--workers=4", "--background-scan-interval=30m", "--sharding=false", "--exception-namespace=platform", "--cluster-exception-namespaces=ops, *", "--http-allow=https://a/*, https://b/*"}); err != nil {
		t.Fatal(err)
	}
	if o.Workers != 4 || o.Interval != 30*time.Minute || o.Sharding || o.Exceptions.Namespace != "platform" || len(o.Exceptions.Wide) != 2 || len(o.HTTP.Allow) != 2 {
		t.Errorf("options %+v do not hold the flags given", o)
	}
}

// The defaults are the topology the chart ships: replicas sharding the
// namespaces, the webhook served, the hand-over on loopback.
func TestDefaultsAreTheShippedTopology(t *testing.T) {
	fs := flag.NewFlagSet("tally-scanner", flag.ContinueOnError)
	o := bindFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if !o.Sharding || o.Webhook.Listen != ":9443" || o.Listen != ":8080" || o.Handover.Listen != "127.0.0.1:8095" || !o.PolicyStatus {
		t.Errorf("defaults: sharding %v, webhook %q, listen %q, hand-over %q, policy status %v; want the chart's: true, :9443, :8080, 127.0.0.1:8095, true",
			o.Sharding, o.Webhook.Listen, o.Listen, o.Handover.Listen, o.PolicyStatus)
	}
}
