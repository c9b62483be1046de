package main

import (
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/utils/clock"

	"github.com/tally-dev/tally/conformance"
)

func newConformanceCommand(clk clock.PassiveClock) *cobra.Command {
	var (
		kubeconfig string
		casesDir   string
		run        string
		timeout    time.Duration
	)
	cmd := &cobra.Command{
		Use:   "conformance --kubeconfig FILE",
		Short: "Run the reporting-rules conformance cases against a cluster",
		Long: `Run tally's conformance cases (one or more per reporting rule ` + caseRuleRange() + `)
against the cluster of a kubeconfig, where a reporting implementation is
already installed: tally (config/overlays/standalone), or Kyverno to compare
semantics. Each case creates its own namespaces and policies (conf-*) and
deletes them at the end. Cases that need what the cluster cannot do (forced
rescans, restarts of tally's processes) are skipped, saying why.

Exit codes: 0 every case passed or was skipped, 2 some failed, 1 could not run.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if kubeconfig == "" {
				return exitError{code: exitCouldNotRun, msg: "--kubeconfig is required (the cluster to test)"}
			}
			var filter *regexp.Regexp
			if run != "" {
				var err error
				if filter, err = regexp.Compile(run); err != nil {
					return exitError{code: exitCouldNotRun, msg: fmt.Sprintf("--run: %v", err)}
				}
			}
			var cases []*conformance.Case
			var err error
			if casesDir != "" {
				cases, err = conformance.Load(os.DirFS(casesDir), ".")
			} else {
				cases, err = conformance.Load(conformance.Cases, "cases")
			}
			if err != nil {
				return exitError{code: exitCouldNotRun, msg: err.Error()}
			}
			p, err := conformance.NewDeployed(cmd.Context(), "kubeconfig", kubeconfig)
			if err != nil {
				return exitError{code: exitCouldNotRun, msg: err.Error()}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "cluster %s: %s\n", p.Config().Host, p.Found())
			r, err := conformance.NewRunner(p)
			if err != nil {
				return exitError{code: exitCouldNotRun, msg: err.Error()}
			}
			r.Timeout = timeout
			out := cmd.OutOrStdout()
			var results []conformance.CaseResult
			failed := 0
			for _, c := range cases {
				if filter != nil && !filter.MatchString(c.Name) {
					continue
				}
				start := clk.Now()
				err := r.Run(cmd.Context(), c)
				res := conformance.CaseResult{Name: c.Name, Rules: c.Rules}
				status := "PASS"
				if skip, ok := err.(*conformance.SkipError); ok {
					res.Skipped, status = true, "SKIP ("+skip.Reason+")"
				} else if err != nil && c.Extension != nil && !p.Can(conformance.CanTally) {
					res.Extension, status = true, "EXTENSION ("+c.ExtensionNote()+")"
				} else if err != nil {
					res.Err, status = err, "FAIL"
					failed++
				}
				fmt.Fprintf(out, "%-5s %s (%s)\n", status, c.Name, clk.Since(start).Round(100*time.Millisecond))
				if err != nil && !res.Skipped {
					// extension cases too: what the other implementation did
					fmt.Fprintf(out, "      %v\n", err)
				}
				results = append(results, res)
			}
			fmt.Fprint(out, conformance.Verdict(results))
			if failed > 0 {
				return exitError{code: exitFailed}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the cluster to test (required)")
	cmd.Flags().StringVar(&casesDir, "cases", "", "folder of case files (default: the cases built into tally)")
	cmd.Flags().StringVar(&run, "run", "", "run only the cases whose name matches this regular expression")
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "how long each expectation may take to hold")
	return cmd
}

// caseRuleRange is the range of reporting rules the built-in cases check,
// "R01-R40", read off the names of the case files (each starts with its
// first rule), so that the help follows the cases.
func caseRuleRange() string {
	entries, err := fs.ReadDir(conformance.Cases, "cases")
	if err != nil {
		return "R01 onwards"
	}
	var first, last string
	lo, hi := 0, 0
	for _, e := range entries {
		id, _, _ := strings.Cut(e.Name(), "-")
		n, err := strconv.Atoi(strings.TrimPrefix(id, "R"))
		if err != nil || !strings.HasPrefix(id, "R") {
			continue
		}
		if first == "" || n < lo {
			first, lo = id, n
		}
		if last == "" || n > hi {
			last, hi = id, n
		}
	}
	if first == "" {
		return "R01 onwards"
	}
	return first + "-" + last
}
