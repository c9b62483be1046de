// Command tally is tally's CLI: it evaluates Kyverno policies offline
// (test, apply) and reads reports.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/utils/clock"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit codes. apply and test use the Kyverno CLI's: 0 or 1 (a failed
// result or expectation and input that cannot be used alike). conformance
// tells them apart, as opa test / terraform test do: 2 when cases failed.
const (
	exitOK          = 0
	exitCouldNotRun = 1
	exitFailed      = 2
	// exitFailedTest is tally test's exit code when an expectation fails:
	// kyverno test's.
	exitFailedTest = 1
)

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runIO(ctx, args, os.Stdin, stdout, stderr)
}

// runIO is run with its standard input given.
func runIO(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return runWith(ctx, args, stdin, stdout, stderr, clock.RealClock{})
}

// runWith is runIO with the CLI's clock given.
func runWith(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, clk clock.PassiveClock) int {
	root := newRootCommand(stdout, stderr, clk)
	root.SetIn(stdin)
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		var exit exitError
		if asExit(err, &exit) {
			if exit.msg != "" {
				fmt.Fprintln(stderr, "tally:", exit.msg)
			}
			return exit.code
		}
		fmt.Fprintln(stderr, "tally:", err)
		return exitCouldNotRun
	}
	return exitOK
}
