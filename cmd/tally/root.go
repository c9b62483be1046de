package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"k8s.io/utils/clock"

	"github.com/tally-dev/tally/internal/version"
)

// exitError carries an exit code out of a command.
type exitError struct {
	code int
	msg  string
}

func (e exitError) Error() string { return fmt.Sprintf("exit %d: %s", e.code, e.msg) }

func asExit(err error, target *exitError) bool { return errors.As(err, target) }

// refused is the closing message of a command that refused policies (each
// reported on its own line before): the command exits 1.
func refused(n int) string {
	if n == 1 {
		return "1 policy refused (see above)"
	}
	return fmt.Sprintf("%d policies refused (see above)", n)
}

// plural is "1 <one>" or "n <many>".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// newRootCommand is the CLI; clk is its only clock (reports' timestamps, a
// Lease's liveness, a case's duration).
func newRootCommand(stdout, stderr io.Writer, clk clock.PassiveClock) *cobra.Command {
	root := &cobra.Command{
		Use:   "tally",
		Short: "Kubernetes policy reports from Kyverno policies, with a fraction of the cost",
		Long: `tally evaluates Kyverno validate policies against Kubernetes resources and
produces the standard PolicyReport / ClusterPolicyReport objects.

This CLI runs the engine offline: test policies against their declared
expectations, or apply them to manifests.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(newVersionCommand(), newTestCommand(), newApplyCommand(clk), newScanCommand(clk), newReportCommand(), newConformanceCommand(clk), newShardsCommand(clk))
	return root
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print tally's version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), "tally", version.String())
			return nil
		},
	}
}
