package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/utils/clock"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/controllers/merge"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/report"
	"github.com/tally-dev/tally/tester"
)

func newScanCommand(clk clock.PassiveClock) *cobra.Command {
	var output string
	var data dataOptions
	cmd := &cobra.Command{
		Use:   "scan PATH...",
		Short: "Run the whole pipeline over folders of manifests and print the PolicyReports",
		Long: `Read every YAML file under the given paths (policies, PolicyExceptions and
resources, told apart by kind), scan the resources as a background scan
would, merge the results exactly as tally-merger does, and print the final
PolicyReports and ClusterPolicyReports: a table by default, or -o yaml|json.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runScan(cmd, args, output, data, clk.Now())
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table, yaml or json")
	data.addFlags(cmd.Flags())
	return cmd
}

type scanInput struct {
	policies   []*engine.Policy
	infos      map[string]merge.PolicyInfo
	exceptions tester.Exceptions
	resources  []map[string]any
	data       *dataInputs
	// invalid counts the policies refused (reported on stderr).
	invalid int
}

// readScanInput sorts the documents of the paths by kind. Problems with one
// file or one policy are reported and the rest is used.
func readScanInput(paths []string, stderr io.Writer) (*scanInput, error) {
	in := &scanInput{infos: map[string]merge.PolicyInfo{}}
	var files []string
	for _, p := range paths {
		err := filepath.WalkDir(p, func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() && tester.IsManifest(path) {
				files = append(files, path)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	sort.Strings(files)
	var policyDocs []tester.Document
	var exceptionFiles []string
	for _, f := range files {
		docs, err := tester.ReadDocuments(f)
		if err != nil {
			fmt.Fprintln(stderr, "error:", err)
			continue
		}
		hasException := false
		for _, d := range docs {
			if err := tester.CheckObject(d); err != nil {
				// A folder of manifests may hold other YAML (Helm values,
				// CI files): left out, never scanned as a resource.
				fmt.Fprintln(stderr, "skipped:", err)
				continue
			}
			// Every kind of policy the scanner evaluates is scanned (CEL
			// policies, ImageValidatingPolicies, MutatingPolicies,
			// ValidatingAdmissionPolicies with their bindings); a
			// document of a policy group is never taken for a resource:
			// one tally does not evaluate is said so.
			apiVersion, _ := d.Object["apiVersion"].(string)
			switch kind, _ := d.Object["kind"].(string); {
			case strings.HasPrefix(apiVersion, "cli.kyverno.io/"):
				// A Kyverno CLI test file, values or context: the test
				// harness's input (tally test), not a resource.
				fmt.Fprintf(stderr, "skipped: %s: %s %s is the test harness's input (tally test), not a resource\n", f, apiVersion, kind)
			case kind == "PolicyException":
				hasException = true
			case tester.CheckPolicyDocument(d) == nil:
				policyDocs = append(policyDocs, d)
			default:
				in.resources = append(in.resources, d.Object)
			}
		}
		if hasException {
			exceptionFiles = append(exceptionFiles, f)
		}
	}
	loaded, err := tester.LoadPolicyDocuments(policyDocs)
	printErrors(stderr, err)
	for _, lp := range loaded {
		switch {
		case lp.Unsupported != nil:
			fmt.Fprintln(stderr, "skipped:", lp.Unsupported)
		case lp.Invalid != nil:
			in.invalid++
			fmt.Fprintln(stderr, "invalid policy:", lp.Invalid)
		default:
			p := lp.Policy
			in.policies = append(in.policies, p)
			// A CEL policy's entries are its own (no rule names to keep).
			info := merge.PolicyInfo{Background: p.Spec.BackgroundEnabled(), Admission: p.Spec.AdmissionEnabled(), Scored: p.Scored, Rules: map[string]bool{}, AnyRule: p.CEL()}
			for _, r := range p.Rules {
				info.Rules[r.Name] = true
			}
			in.infos[merge.PolicyKey(p.Source, p.Name)] = info
		}
	}
	if in.exceptions, err = tester.LoadExceptions(exceptionFiles); err != nil {
		fmt.Fprintln(stderr, "error:", err)
	}
	return in, nil
}

func runScan(cmd *cobra.Command, paths []string, output string, data dataOptions, now time.Time) error {
	in, err := readScanInput(paths, cmd.ErrOrStderr())
	if err != nil {
		return exitError{code: exitCouldNotRun, msg: err.Error()}
	}
	if in.data, err = data.read(); err != nil {
		return exitError{code: exitCouldNotRun, msg: err.Error()}
	}
	if err := scan(cmd, in, output, now); err != nil {
		return err
	}
	if in.invalid > 0 {
		// The valid policies were scanned and their reports printed; the
		// refused ones make the run fail.
		return exitError{code: exitCouldNotRun, msg: refused(in.invalid)}
	}
	return nil
}

func scan(cmd *cobra.Command, in *scanInput, output string, now time.Time) error {
	if len(in.policies) == 0 || len(in.resources) == 0 {
		return exitError{code: exitCouldNotRun, msg: "nothing to scan: " + plural(len(in.policies), "valid policy", "valid policies") + ", " + plural(len(in.resources), "resource", "resources")}
	}
	var objs []any
	var rows [][]string
	for _, res := range in.resources {
		req := in.exceptions.Request(res)
		req.Background = true
		if in.data != nil {
			in.data.request(req, res)
		}
		var background []wgv1alpha2.PolicyReportResult
		for _, p := range in.policies {
			if !p.Spec.BackgroundEnabled() {
				continue
			}
			for _, r := range p.Evaluate(cmd.Context(), req) {
				background = append(background, report.Result(p, r, report.ProcessBackground, now))
			}
		}
		final := merge.Merge(merge.Input{Background: background, BackgroundCurrent: true, Policies: in.infos})
		if len(final) == 0 {
			continue
		}
		s := report.SubjectOf(res)
		polr, cpolr := report.Final(s, final)
		if polr != nil {
			objs = append(objs, polr)
		} else {
			objs = append(objs, cpolr)
		}
		sum := wgv1alpha2.SummaryOf(final)
		name := s.Kind + "/" + s.Name
		if s.Namespace != "" {
			name = s.Kind + "/" + s.Namespace + "/" + s.Name
		}
		rows = append(rows, []string{name, fmt.Sprint(sum.Pass), fmt.Sprint(sum.Fail), fmt.Sprint(sum.Warn), fmt.Sprint(sum.Error), fmt.Sprint(sum.Skip)})
	}
	w := cmd.OutOrStdout()
	switch output {
	case "table", "":
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "RESOURCE\tPASS\tFAIL\tWARN\tERROR\tSKIP")
		for _, r := range rows {
			fmt.Fprintln(tw, strings.Join(r, "\t"))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		noun := "reports"
		if len(rows) == 1 {
			noun = "report"
		}
		_, err := fmt.Fprintf(w, "%d %s\n", len(rows), noun)
		return err
	case "yaml", "json":
		// The same List in either format, as kubectl prints several objects.
		return encode(w, output, reportList(objs))
	}
	return exitError{code: exitCouldNotRun, msg: fmt.Sprintf("unknown output %q (want table, yaml or json)", output)}
}
