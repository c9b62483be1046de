package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	sigsyaml "sigs.k8s.io/yaml"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/report"
	"github.com/tally-dev/tally/tester"
)

type applyOptions struct {
	policies, resources, exceptions []string
	policyReport                    bool
	output                          string
}

func newApplyCommand() *cobra.Command {
	var o applyOptions
	cmd := &cobra.Command{
		Use:   "apply -p POLICIES -r RESOURCES",
		Short: "Evaluate policies against manifests and print the results or the PolicyReports",
		Long: `Evaluate the validate rules of ClusterPolicies and Policies against resource
manifests (files or folders), as a background scan would, and print one line
per (resource, policy, rule) result, or with --policy-report the
PolicyReport/ClusterPolicyReport objects a cluster would get.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runApply(cmd, o) },
	}
	cmd.Flags().StringSliceVarP(&o.policies, "policy", "p", nil, "policy files or folders (repeatable)")
	cmd.Flags().StringSliceVarP(&o.resources, "resource", "r", nil, "resource files or folders (repeatable)")
	cmd.Flags().StringSliceVarP(&o.exceptions, "exception", "e", nil, "PolicyException files (repeatable)")
	cmd.Flags().BoolVar(&o.policyReport, "policy-report", false, "print PolicyReports instead of results")
	cmd.Flags().StringVarP(&o.output, "output", "o", "table", "output format: table, yaml or json")
	_ = cmd.MarkFlagRequired("policy")
	_ = cmd.MarkFlagRequired("resource")
	return cmd
}

type applied struct {
	resource map[string]any
	policy   *engine.Policy
	results  []engine.RuleResult
}

func runApply(cmd *cobra.Command, o applyOptions) error {
	stderr := cmd.ErrOrStderr()
	loaded, err := tester.LoadPolicies(o.policies)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
	}
	var policies []*engine.Policy
	invalid := 0
	for _, lp := range loaded {
		switch {
		case lp.Unsupported != nil:
			fmt.Fprintln(stderr, "skipped:", lp.Unsupported)
		case lp.Invalid != nil:
			invalid++
			fmt.Fprintln(stderr, "invalid policy:", lp.Invalid)
		default:
			policies = append(policies, lp.Policy)
		}
	}
	exceptions, err := tester.LoadExceptions(o.exceptions)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
	}
	var resources []map[string]any
	for _, path := range o.resources {
		docs, err := tester.ReadManifests(path)
		if err != nil {
			fmt.Fprintln(stderr, "error:", err)
		}
		for _, d := range docs {
			resources = append(resources, d.Object)
		}
	}
	if len(policies) == 0 || len(resources) == 0 {
		return exitError{code: exitCouldNotRun, msg: fmt.Sprintf("nothing to apply: %d valid policies, %d resources", len(policies), len(resources))}
	}
	var out []applied
	for _, res := range resources {
		req := exceptions.Request(res)
		req.Background = true
		for _, p := range policies {
			if rs := p.Evaluate(cmd.Context(), req); len(rs) > 0 {
				out = append(out, applied{resource: res, policy: p, results: rs})
			}
		}
	}
	write := printResults
	if o.policyReport {
		write = printReports
	}
	if err := write(cmd.OutOrStdout(), o.output, out); err != nil {
		return err
	}
	if invalid > 0 {
		// The valid policies were applied and printed; the refused ones
		// make the run fail.
		return exitError{code: exitCouldNotRun, msg: refused(invalid)}
	}
	return nil
}

func printResults(w io.Writer, format string, out []applied) error {
	type row struct {
		Resource string `json:"resource"`
		engine.RuleResult
	}
	var rows []row
	var summary wgv1alpha2.PolicyReportSummary
	for _, a := range out {
		s := report.SubjectOf(a.resource)
		name := s.Kind + "/" + s.Name
		if s.Namespace != "" {
			name = s.Kind + "/" + s.Namespace + "/" + s.Name
		}
		for _, r := range a.results {
			rows = append(rows, row{Resource: name, RuleResult: r})
			summary.Add(r.Result)
		}
	}
	switch format {
	case "json", "yaml":
		return encode(w, format, rows)
	case "table", "":
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "RESOURCE\tPOLICY\tRULE\tRESULT\tMESSAGE")
		for _, r := range rows {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Resource, r.Policy, r.Rule, r.Result, r.Message)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		_, err := fmt.Fprintf(w, "pass: %d, fail: %d, warn: %d, error: %d, skip: %d\n", summary.Pass, summary.Fail, summary.Warn, summary.Error, summary.Skip)
		return err
	}
	return exitError{code: exitCouldNotRun, msg: fmt.Sprintf("unknown output %q (want table, yaml or json)", format)}
}

func printReports(w io.Writer, format string, out []applied) error {
	now := time.Now()
	bySubject := map[report.Subject][]wgv1alpha2.PolicyReportResult{}
	var order []report.Subject
	for _, a := range out {
		s := report.SubjectOf(a.resource)
		if _, ok := bySubject[s]; !ok {
			order = append(order, s)
		}
		for _, r := range a.results {
			bySubject[s] = append(bySubject[s], report.Result(a.policy, r, report.ProcessBackground, now))
		}
	}
	var objs []any
	for _, s := range order {
		polr, cpolr := report.Final(s, bySubject[s])
		if polr != nil {
			objs = append(objs, polr)
		} else {
			objs = append(objs, cpolr)
		}
	}
	switch format {
	case "yaml", "table", "":
		for i, o := range objs {
			if i > 0 {
				fmt.Fprintln(w, "---")
			}
			if err := encode(w, "yaml", o); err != nil {
				return err
			}
		}
		return nil
	case "json":
		return encode(w, "json", map[string]any{"apiVersion": "v1", "kind": "List", "items": objs})
	}
	return exitError{code: exitCouldNotRun, msg: fmt.Sprintf("unknown output %q (want yaml or json)", format)}
}

func encode(w io.Writer, format string, v any) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	data, err := sigsyaml.Marshal(v)
	if err != nil {
		return errors.New("encode yaml: " + err.Error())
	}
	_, err = w.Write(data)
	return err
}
