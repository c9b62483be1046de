package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tally-dev/tally/tester"
)

type testOptions struct {
	output, byTier, fileName, selector string
	failOnly, detailed, requireTests   bool
	removeColor, registry              bool
	registryQPS                        float64
	trustedRoot                        string
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
Expectations of verifyImages rules and ImageValidatingPolicies are checked
against the registries (as kyverno test checks them, with or without
--registry); with --registry=false they are not evaluated, and counted as
unsupported (exit 1).

Exit codes, as kyverno test's:
  0  every expectation passed, or no test file was found (without
     --require-tests)
  1  an expectation failed or is unsupported (mutate, generate); or the run
     was broken: a test file, or a policy or resource file a test names,
     could not be read or is not Kubernetes YAML (the other tests still
     run), a policy was refused, a flag is wrong, or --require-tests found
     no test to run`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runTest(cmd, args, o) },
	}
	f := cmd.Flags()
	f.StringVarP(&o.output, "output-format", "o", "table", "output format: table, json, yaml or junit")
	f.StringVar(&o.output, "output", "table", "alias of --output-format")
	_ = f.MarkHidden("output") // errs only for a flag not defined just above
	f.StringVar(&o.byTier, "by-tier", "", "corpus INDEX.tsv: also count outcomes per tier")
	f.StringVarP(&o.fileName, "file-name", "f", tester.TestFileName, "name of the test files")
	f.StringVarP(&o.selector, "test-case-selector", "t", "", `run only the expectations selected: "policy=NAME, rule=NAME, resource=NAME" (any of the three; * and ? are wildcards)`)
	f.BoolVar(&o.failOnly, "fail-only", false, "list only the expectations that failed")
	f.BoolVar(&o.detailed, "detailed-results", false, "list expected and actual results and whole reasons")
	f.BoolVar(&o.requireTests, "require-tests", false, "fail (exit 1) when no test file is found or the selector selects no expectation")
	f.BoolVar(&o.removeColor, "remove-color", false, "accepted for kyverno test compatibility: tally prints no color")
	addRegistryFlags(f, &o.registry, &o.registryQPS, &o.trustedRoot)
	f.BoolVarP(&o.detailed, "verbose", "v", false, "alias of --detailed-results")
	_ = f.MarkHidden("verbose") // errs only for a flag not defined just above
	return cmd
}

func runTest(cmd *cobra.Command, args []string, o testOptions) error {
	sel, err := tester.ParseSelector(o.selector)
	if err != nil {
		return exitError{code: exitCouldNotRun, msg: err.Error()}
	}
	out := cmd.OutOrStdout()
	var reporter tester.Reporter
	switch o.output {
	case "table", "":
		reporter = tester.NewTable(out, tester.TableOptions{FailOnly: o.failOnly, Detailed: o.detailed, Roots: args})
	case "json":
		reporter = tester.NewJSON(out)
	case "yaml":
		reporter = tester.NewYAML(out)
	case "junit":
		reporter = tester.NewJUnit(out)
	default:
		return exitError{code: exitCouldNotRun, msg: fmt.Sprintf("unknown output format %q (want table, json, yaml or junit)", o.output)}
	}
	name := o.fileName
	if name == tester.TestFileName {
		name = "" // kyverno-test.yaml or kyverno-test.yml
	}
	files, err := tester.DiscoverNamed(args, name)
	if err != nil {
		return exitError{code: exitCouldNotRun, msg: err.Error()}
	}
	if len(files) == 0 {
		msg := fmt.Sprintf("no %s found under %s", o.fileName, strings.Join(args, ", "))
		if o.requireTests {
			return exitError{code: exitCouldNotRun, msg: msg + " (--require-tests)"}
		}
		fmt.Fprintln(cmd.ErrOrStderr(), "tally:", msg)
		return nil
	}
	var index *tester.Index
	if o.byTier != "" {
		if index, err = tester.LoadIndex(o.byTier); err != nil {
			return exitError{code: exitCouldNotRun, msg: fmt.Sprintf("--by-tier: %v", err)}
		}
	}
	// The reporter writes each file's table as the file has run; what goes
	// to stderr and the exit code come from the summary, once it is whole.
	rep, err := tester.RunFiles(cmd.Context(), files, tester.Options{Selector: sel, Index: index, Images: imageVerifier(o.registry, o.registryQPS, o.trustedRoot), Registry: registryReader(o.registry)}, reporter)
	if err != nil {
		return exitError{code: exitCouldNotRun, msg: err.Error()}
	}
	for _, e := range rep.Errors {
		fmt.Fprintln(cmd.ErrOrStderr(), "error:", e)
	}
	for _, e := range rep.InvalidPolicies {
		fmt.Fprintln(cmd.ErrOrStderr(), "invalid policy:", e)
	}
	if o.output != "table" && o.output != "" {
		fmt.Fprintln(cmd.ErrOrStderr(), rep.Counts)
	}
	total := rep.Counts.Passed + rep.Counts.Failed + rep.Counts.Skipped + rep.Counts.Unsupported
	switch status := rep.Status(); {
	case status == tester.Errored && len(rep.Errors) > 0:
		// The other tests ran; these could not, and their expectations
		// failed.
		return exitError{code: exitCouldNotRun, msg: plural(len(rep.Errors), "test could not be run", "tests could not be run") + " (see above)"}
	case status == tester.Errored:
		// The other tests ran; the refused policies' could not.
		return exitError{code: exitCouldNotRun, msg: refused(len(rep.InvalidPolicies))}
	case o.requireTests && total == 0:
		return exitError{code: exitCouldNotRun, msg: "no test was run (--require-tests)"}
	case status >= tester.Unsupported:
		// Kyverno's CLI exits 1 when an expectation fails or is
		// unsupported; tally does the same so that a CI gate written for
		// one works with the other.
		return exitError{code: exitFailedTest}
	}
	return nil
}
