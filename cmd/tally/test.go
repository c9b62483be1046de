package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tally-dev/tally/tester"
)

type testOptions struct {
	output, byTier, fileName, selector string
	failOnly, detailed, requireTests   bool
}

func newTestCommand() *cobra.Command {
	var o testOptions
	cmd := &cobra.Command{
		Use:   "test PATH...",
		Short: "Run the kyverno-test.yaml files under the given paths",
		Long: `Run every kyverno-test.yaml (cli.kyverno.io/v1alpha1 Test) found under the
given paths and compare tally's results with the expected ones, one
expectation per (policy, rule, resource). Each test file gets a table, as
kyverno test prints it, named relative to the path it was found under.

A policy that a cluster would refuse (its CRD's schema, Kyverno's rules:
unknown fields, bad enums, a rule without match, unknown operators,
malformed anchors; CEL expressions that do not compile) is reported with its
file and field paths; the other tests still run. Expectations of results
tally does not evaluate (mutate, generate) are counted apart as unsupported.

Exit codes: 0 all passed, 2 some failed or are unsupported, 1 could not run
(a test file could not be read, a policy was refused, or --require-tests and
no test was found).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runTest(cmd, args, o) },
	}
	f := cmd.Flags()
	f.StringVarP(&o.output, "output", "o", "table", "output format: table, json or junit")
	f.StringVar(&o.byTier, "by-tier", "", "corpus INDEX.tsv: also count outcomes per tier")
	f.StringVarP(&o.fileName, "file-name", "f", tester.TestFileName, "name of the test files")
	f.StringVarP(&o.selector, "test-case-selector", "t", "", `run only the expectations selected: "policy=NAME, rule=NAME, resource=NAME"`)
	f.BoolVar(&o.failOnly, "fail-only", false, "list only the expectations that failed")
	f.BoolVar(&o.detailed, "detailed-results", false, "list expected and actual results and whole reasons")
	f.BoolVar(&o.requireTests, "require-tests", false, "fail when no test is found")
	f.BoolVarP(&o.detailed, "verbose", "v", false, "alias of --detailed-results")
	_ = f.MarkHidden("verbose")
	return cmd
}

func runTest(cmd *cobra.Command, args []string, o testOptions) error {
	sel, err := tester.ParseSelector(o.selector)
	if err != nil {
		return exitError{code: exitCouldNotRun, msg: err.Error()}
	}
	name := o.fileName
	if name == tester.TestFileName {
		name = "" // kyverno-test.yaml or kyverno-test.yml
	}
	rep, err := tester.RunWith(cmd.Context(), args, tester.Options{FileName: name, Selector: sel})
	if err != nil {
		return exitError{code: exitCouldNotRun, msg: err.Error()}
	}
	if o.byTier != "" {
		if err := rep.ApplyIndex(o.byTier); err != nil {
			return exitError{code: exitCouldNotRun, msg: fmt.Sprintf("--by-tier: %v", err)}
		}
	}
	for _, e := range rep.Errors {
		fmt.Fprintln(cmd.ErrOrStderr(), "error:", e)
	}
	for _, e := range rep.InvalidPolicies {
		fmt.Fprintln(cmd.ErrOrStderr(), "invalid policy:", e)
	}
	out := cmd.OutOrStdout()
	switch o.output {
	case "table", "":
		err = rep.WriteTable(out, tester.TableOptions{FailOnly: o.failOnly, Detailed: o.detailed, Roots: args})
	case "json":
		err = rep.WriteJSON(out)
	case "junit":
		err = rep.WriteJUnit(out)
	default:
		return exitError{code: exitCouldNotRun, msg: fmt.Sprintf("unknown output %q (want table, json or junit)", o.output)}
	}
	if err != nil {
		return exitError{code: exitCouldNotRun, msg: err.Error()}
	}
	if o.output == "json" || o.output == "junit" {
		fmt.Fprintln(cmd.ErrOrStderr(), rep.Counts)
	}
	total := rep.Counts.Passed + rep.Counts.Failed + rep.Counts.Skipped + rep.Counts.Unsupported
	switch {
	case len(rep.InvalidPolicies) > 0:
		// The other tests ran; the refused policies' could not.
		return exitError{code: exitCouldNotRun, msg: refused(len(rep.InvalidPolicies))}
	case o.requireTests && total == 0:
		return exitError{code: exitCouldNotRun, msg: "no test was run (--require-tests)"}
	case rep.Counts.Failed > 0 || rep.Counts.Unsupported > 0:
		return exitError{code: exitFailed}
	}
	return nil
}
