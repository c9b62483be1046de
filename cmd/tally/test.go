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

Exit codes: 0 all passed, 2 some failed, 1 could not run.`,
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
