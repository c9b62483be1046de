package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tally-dev/tally/tester"
)

func newTestCommand() *cobra.Command {
	var (
		output  string
		byTier  string
		verbose bool
	)
	cmd := &cobra.Command{
		Use:   "test PATH...",
		Short: "Run the kyverno-test.yaml files under the given paths",
		Long: `Run every kyverno-test.yaml (cli.kyverno.io/v1alpha1 Test) found under the
given paths and compare tally's results with the expected ones, one
expectation per (policy, rule, resource).

A policy that a cluster would refuse (its CRD's schema, Kyverno's rules:
unknown fields, bad enums, a rule without match, unknown operators,
malformed anchors) is reported with its file and field paths; the other
tests still run.

Exit codes: 0 all passed, 2 some failed, 1 could not run (a test file
could not be read, or a policy was refused).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rep, err := tester.Run(cmd.Context(), args)
			if err != nil {
				return exitError{code: exitCouldNotRun, msg: err.Error()}
			}
			if byTier != "" {
				if err := rep.ApplyIndex(byTier); err != nil {
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
			switch output {
			case "table", "":
				err = rep.WriteTable(out, verbose)
			case "json":
				err = rep.WriteJSON(out)
			case "junit":
				err = rep.WriteJUnit(out)
			default:
				return exitError{code: exitCouldNotRun, msg: fmt.Sprintf("unknown output %q (want table, json or junit)", output)}
			}
			if err != nil {
				return exitError{code: exitCouldNotRun, msg: err.Error()}
			}
			if output == "json" || output == "junit" {
				fmt.Fprintln(cmd.ErrOrStderr(), rep.Counts)
			}
			if n := len(rep.InvalidPolicies); n > 0 {
				// The other tests ran; the refused policies' could not.
				return exitError{code: exitCouldNotRun, msg: refused(n)}
			}
			if rep.Counts.Failed > 0 {
				return exitError{code: exitFailed}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table, json or junit")
	cmd.Flags().StringVar(&byTier, "by-tier", "", "corpus INDEX.tsv: also count outcomes per tier")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "list passing expectations too")
	return cmd
}
