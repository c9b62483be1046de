package conformance_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/e2e-framework/pkg/env"
	"sigs.k8s.io/e2e-framework/pkg/envconf"

	"github.com/tally-dev/tally/conformance"
	"github.com/tally-dev/tally/conformance/harness"
)

// The suite runs every case of conformance/cases against one provider,
// chosen by TALLY_CONFORMANCE_PROVIDER:
//
//   - local (default, what `make test` and CI run): the control plane of
//     e2e/cluster with tally-scanner and tally-merger as processes;
//   - kind: a kind cluster from kind-config.yaml with tally deployed from
//     config/overlays/kind (make e2e-kind; needs Docker);
//   - kubeconfig: the cluster of TALLY_CONFORMANCE_KUBECONFIG, with a
//     reporting implementation already installed (tally, or Kyverno to
//     compare semantics).
var (
	testenv  env.Environment
	provider conformance.Provider
	runner   *conformance.Runner
	cases    = mustLoad()
	// suiteFailed: some case failed; the local provider keeps its logs.
	suiteFailed bool
)

func mustLoad() []*conformance.Case {
	cs, err := conformance.Load(conformance.Cases, "cases")
	if err != nil {
		panic(err)
	}
	return cs
}

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() { // the case checks of case_test.go need no cluster
		os.Exit(m.Run())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	testenv = env.NewWithConfig(envconf.New()).WithContext(ctx)
	var stopProvider func() error
	testenv.Setup(func(ctx context.Context, cfg *envconf.Config) (context.Context, error) {
		p, stopFn, err := harness.ProviderFromEnv(ctx, os.Getenv("TALLY_CONFORMANCE_PROVIDER"))
		if err != nil {
			return ctx, fmt.Errorf("conformance provider: %w", err)
		}
		provider, stopProvider = p, stopFn
		if runner, err = conformance.NewRunner(p); err != nil {
			return ctx, err
		}
		runner.Logf = func(format string, args ...any) { fmt.Fprintf(GinkgoWriter, format+"\n", args...) }
		return ctx, nil
	})
	testenv.Finish(func(ctx context.Context, _ *envconf.Config) (context.Context, error) {
		var leftovers error
		if provider != nil && provider.Can(conformance.CanIngest) {
			// Beside Kyverno: every EphemeralReport was folded and deleted.
			counts, names, err := conformance.CheckNoLeftovers(ctx, provider.Config(), time.Minute)
			fmt.Printf("report objects at the end of the run (%s): %s\n", provider.Name(), conformance.FormatCounts(counts))
			for kind, list := range names {
				fmt.Printf("  %s: %s\n", kind, strings.Join(list, ", "))
			}
			if src, ok := provider.(conformance.MetricsSource); ok {
				for _, component := range []string{"merger"} {
					text, err := src.Metrics(ctx, component)
					if err != nil {
						continue
					}
					for _, line := range strings.Split(string(text), "\n") {
						for _, name := range []string{"tally_merge_admission_reports_deleted_total{", "tally_merge_unusable_reports_total"} {
							if strings.HasPrefix(line, name) {
								fmt.Printf("%s (since its last restart): %s\n", component, line)
							}
						}
					}
				}
			}
			leftovers = err
		}
		if l, ok := provider.(*harness.Local); ok && (suiteFailed || leftovers != nil) {
			l.KeepLogs()
			fmt.Printf("tally's logs are kept in %s\n", l.Dir())
		}
		if stopProvider != nil {
			return ctx, errors.Join(leftovers, stopProvider())
		}
		return ctx, leftovers
	})
	code := testenv.Run(m)
	stop()
	os.Exit(code)
}

func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("the conformance suite needs a cluster; -short runs only the case checks")
	}
	if provider == nil {
		t.Fatal("no provider: the environment's setup did not run")
	}
	RegisterFailHandler(Fail)
	suite, reporter := GinkgoConfiguration()
	suite.Timeout = 80 * time.Minute
	RunSpecs(t, "tally conformance ("+provider.Name()+")", suite, reporter)
}

var _ = Describe("reporting rules", func() {
	for _, c := range cases {
		It(c.Name, Label(c.Rules...), func(ctx SpecContext) {
			By(c.Description)
			err := runner.Run(ctx, c)
			if skip, ok := err.(*conformance.SkipError); ok {
				Skip(skip.Reason)
			}
			if err != nil && c.Extension != nil && !provider.Can(conformance.CanTally) {
				Skip(extensionPrefix + c.ExtensionNote() + "; here: " + err.Error())
			}
			Expect(err).NotTo(HaveOccurred(), logsHint())
		}, SpecTimeout(10*time.Minute))
	}
})

// extensionPrefix marks the skip of a tally extension case that failed on
// another implementation.
const extensionPrefix = "EXTENSION: "

func logsHint() string {
	if l, ok := provider.(*harness.Local); ok {
		return "tally's logs: " + filepath.Join(l.Dir(), "*.log")
	}
	return ""
}

// The per-rule verdict, printed at the end: a rule passes when every case
// naming it passed.
var _ = ReportAfterSuite("per-rule verdict", func(report Report) {
	suiteFailed = !report.SuiteSucceeded
	var results []conformance.CaseResult
	for _, s := range report.SpecReports {
		if s.LeafNodeType != types.NodeTypeIt {
			continue
		}
		res := conformance.CaseResult{Name: s.LeafNodeText, Rules: s.Labels()}
		switch {
		case s.State == types.SpecStateSkipped && strings.HasPrefix(s.Failure.Message, extensionPrefix):
			res.Extension = true
		case s.State == types.SpecStateSkipped:
			res.Skipped = true
		case s.State != types.SpecStatePassed:
			res.Err = fmt.Errorf("%s", strings.TrimSpace(s.FailureMessage()))
		}
		results = append(results, res)
	}
	fmt.Fprint(os.Stdout, conformance.Verdict(results))
})
