package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	sigsyaml "sigs.k8s.io/yaml"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/controllers/data"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/cel"
	"github.com/tally-dev/tally/engine/imageverify/sigverify"
	"github.com/tally-dev/tally/report"
	"github.com/tally-dev/tally/tester"
)

type applyOptions struct {
	clock                           clock.PassiveClock // the reports' timestamps
	policies, resources, exceptions []string
	policyReport, auditWarn         bool
	detailed, table, removeColor    bool
	output, reportAPI               string
	// resourcesOut is -o/--output: where mutated and generated resources go.
	resourcesOut string
	warnExitCode int
	data         dataOptions
	cluster      clusterOptions
}

// dataOptions are what the cluster would give policies, offline: values,
// the requesting user and the objects policies read (apply and scan).
type dataOptions struct {
	valuesFile, userInfo string
	set, contextFiles    []string
	registry             bool
	registryQPS          float64
	trustedRoot          string
}

func (o *dataOptions) addFlags(f *pflag.FlagSet) {
	f.StringVarP(&o.valuesFile, "values-file", "f", "", "a Values file (cli.kyverno.io Values): variables, per policy, rule and resource, that the cluster would give")
	f.StringSliceVarP(&o.set, "set", "s", nil, "global variables, key=value (repeatable, comma-separated)")
	f.StringVarP(&o.userInfo, "userinfo", "u", "", "a UserInfo file: the requesting user, roles and cluster roles")
	addRegistryFlags(f, &o.registry, &o.registryQPS, &o.trustedRoot)
	f.StringSliceVar(&o.contextFiles, "context-file", nil, "context files (cli.kyverno.io Context: spec.resources) or manifests: the objects configMap and apiCall context entries and CEL resource.Get/List read (repeatable)")
}

// dataInputs are what dataOptions name, read.
type dataInputs struct {
	values *tester.ValuesSpec
	user   *engine.UserInfo
	// cluster serves context entries and the CEL resource library; nil
	// when no context file is given.
	cluster *data.Offline
	// images verifies images (--registry); nil skips verifyImages rules.
	images engine.ImageVerifier
	// registry reads image data (getImageData) from the registries.
	registry cel.ImageData
}

// registryUsage is Kyverno's --registry. Kyverno 1.19's CLI reaches the
// registries whether it is given or not (the flag feeds other things):
// tally's does too, and --registry=false is the explicit way not to.
const registryUsage = "access image registries (with the local docker credentials) to verify the images of verifyImages rules and ImageValidatingPolicies and to read image data (getImageData, imageRegistry entries); on by default, as Kyverno's CLI reaches them whatever this flag says; --registry=false makes no registry request: those results are skipped, and tally test counts their expectations as not evaluated (exit 1)"

// DefaultCLIRegistryQPS is the CLI's default rate of requests to one
// registry: 100 distinct images (400 requests) take about as long as
// Kyverno's CLI takes for them (1.5 s), the scanner's default (20/s) being
// sized for a cluster's steady load instead.
const DefaultCLIRegistryQPS = 300

// addRegistryFlags adds --registry, --registry-qps and
// --sigstore-trusted-root.
func addRegistryFlags(f *pflag.FlagSet, registry *bool, qps *float64, trustedRoot *string) {
	f.BoolVar(registry, "registry", true, registryUsage)
	f.Float64Var(qps, "registry-qps", DefaultCLIRegistryQPS, "requests per second to one registry at most (burst: twice as many); 0 or less: no limit")
	f.StringVar(trustedRoot, "sigstore-trusted-root", "", "a Sigstore trusted_root.json (cosign's --trusted-root) that keyless signatures without roots of their own, and attestations without attestors, are verified against (default: the public Sigstore root, read from its TUF repository)")
}

// imageVerifier is the verifier of the CLI's image checks (nil with
// --registry=false): the registries' requests at most qps a second each
// (none: no limit), keyless signatures against trustedRoot (a file; ""
// for the public Sigstore root).
func imageVerifier(on bool, qps float64, trustedRoot string) engine.ImageVerifier {
	if !on {
		return nil
	}
	o := sigverify.Options{RequestsPerSecond: qps, Burst: int(2 * qps)}
	if qps <= 0 {
		o.RequestsPerSecond, o.Burst = -1, 1
	}
	if trustedRoot != "" {
		o.TrustedRoot = sigverify.TrustedRootFile(trustedRoot)
	}
	return sigverify.New(o)
}

// registryReader reads image data from the registries (nil with
// --registry=false).
func registryReader(on bool) cel.ImageData {
	if !on {
		return nil
	}
	return &data.Registry{}
}

// request fills in a request for res what the inputs give it.
func (in *dataInputs) request(req *engine.Request, res map[string]any) {
	s := report.SubjectOf(res)
	req.Values = tester.ValueSource(in.values, s.Name)
	req.Subresource, req.Parent = in.values.SubresourceOf(res)
	req.UserInfo = in.user
	if labels := in.values.NamespaceLabels(s.Namespace); labels != nil {
		req.NamespaceLabels = labels
	}
	if in.cluster != nil {
		req.Loader, req.Data = in.cluster, in.cluster
	}
	req.Images = in.images
	if in.registry != nil {
		req.Registry = in.registry
	}
}

func newApplyCommand(clk clock.PassiveClock) *cobra.Command {
	o := applyOptions{clock: clk}
	cmd := &cobra.Command{
		Use:   "apply [POLICY...] -r RESOURCE...",
		Short: "Evaluate policies against manifests and print the results or the PolicyReports",
		Long: `Evaluate policies (files or folders given as arguments or with --policy) against
resource manifests (-r: files, folders, or - for standard input), as a background
scan would. Every document read must be a Kubernetes object (apiVersion and
kind): a Helm values file or plain JSON is an error naming the file, as in
Kyverno's CLI. Flags and exit codes are the Kyverno CLI's:

  exit 0  every result passed (or was skipped)
  exit 1  a result failed or erred; or some input could not be used: a file
          that cannot be read or is not Kubernetes YAML, a resource where a
          policy should be, a refused policy, nothing to apply
  --warn-exit-code N: exit N when there are warnings and nothing else is wrong

Without --detailed-results the table lists the results that did not pass and a
summary. -p/--policy-report prints what Kyverno's CLI prints instead: one
ClusterPolicyReport named "merged" with the results of the cluster-wide
policies (each naming its resource), then a PolicyReport per namespaced
policy; -o yaml (default) or json. The exit codes are the same with -p.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.policies = append(args, o.policies...)
			return runApply(cmd, o)
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.policies, "policy", nil, "policy files or folders (repeatable; also as arguments)")
	f.StringSliceVarP(&o.resources, "resource", "r", nil, "resource files or folders, - for standard input (repeatable)")
	f.StringSliceVarP(&o.exceptions, "exception", "e", nil, "PolicyException files (repeatable)")
	f.BoolVarP(&o.policyReport, "policy-report", "p", false, "print PolicyReports instead of results")
	f.StringVar(&o.reportAPI, "report-api", string(report.APIOpenReports), "API of the reports -p prints: openreports (openreports.io ClusterReport, Report: what Kyverno 1.19's CLI prints) or wgpolicyk8s (ClusterPolicyReport, PolicyReport)")
	f.StringVar(&o.output, "output-format", "table", "output format of the results or the reports: table, yaml or json")
	f.StringVarP(&o.resourcesOut, "output", "o", "", "write the mutated and generated resources to this file (.yaml, .yml) or folder, as kyverno apply -o does; without it they are printed")
	o.data.addFlags(f)
	f.BoolVar(&o.auditWarn, "audit-warn", false, "report failures of Audit rules as warnings")
	f.IntVar(&o.warnExitCode, "warn-exit-code", 0, "exit code when there are warnings and no failure or error")
	f.BoolVar(&o.detailed, "detailed-results", false, "list every result, passes included")
	f.BoolVarP(&o.table, "table", "t", false, "print the results as a table (tally's default; accepted for kyverno apply compatibility)")
	f.BoolVar(&o.removeColor, "remove-color", false, "accepted for kyverno apply compatibility: tally prints no color")
	o.cluster.addFlags(f)
	return cmd
}

type applied struct {
	resource map[string]any
	policy   *engine.Policy
	results  []engine.RuleResult
}

func runApply(cmd *cobra.Command, o applyOptions) error {
	stderr := cmd.ErrOrStderr()
	reportAPI, err := report.ParseAPI(o.reportAPI)
	if err != nil {
		return exitError{code: exitCouldNotRun, msg: "--report-api: " + err.Error()}
	}
	if len(o.policies) == 0 {
		return exitError{code: exitCouldNotRun, msg: "no policy given: name policy files or folders as arguments or with --policy"}
	}
	unreadable := 0
	loaded, err := tester.LoadPolicies(o.policies)
	unreadable += printErrors(stderr, err)
	notPolicies := countErrors[*tester.NotPolicyError](err)
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
	unreadable += printErrors(stderr, err)
	var resources []map[string]any
	policiesAsResources := 0
	for _, path := range o.resources {
		var docs []tester.Document
		var err error
		if path == "-" {
			docs, err = readStdin(cmd.InOrStdin())
		} else {
			docs, err = tester.ReadManifests(path)
		}
		unreadable += printErrors(stderr, err)
		for _, d := range docs {
			resources = append(resources, d.Object)
			if tester.IsPolicyKind(d.Object) {
				policiesAsResources++
			}
		}
	}
	if len(policies) == 0 && notPolicies > 0 && policiesAsResources > 0 {
		return exitError{code: exitCouldNotRun, msg: "policies and resources look swapped: give policies as arguments (or --policy) and resources with -r/--resource"}
	}
	var live *liveCluster
	switch {
	case o.cluster.cluster:
		if live, err = o.cluster.connect(cmd.Context()); err != nil {
			return exitError{code: exitCouldNotRun, msg: err.Error()}
		}
		defer live.close()
		objs, err := live.resources(cmd.Context(), policies, o.cluster.namespace)
		unreadable += printErrors(stderr, err)
		resources = append(resources, objs...)
	case len(o.resources) == 0:
		return exitError{code: exitCouldNotRun, msg: "no resource given: name manifests with -r/--resource, or read a cluster with --cluster"}
	case o.cluster.namespace != "" || o.cluster.kubeconfig != "":
		return exitError{code: exitCouldNotRun, msg: "--namespace and --kubeconfig read a cluster: add --cluster"}
	}
	if len(policies) == 0 || len(resources) == 0 {
		msg := "nothing to apply: " + plural(len(policies), "valid policy", "valid policies") + ", " + plural(len(resources), "resource", "resources")
		if unreadable > 0 {
			msg += " (" + plural(unreadable, "input", "inputs") + " could not be used, see above)"
		}
		return exitError{code: exitCouldNotRun, msg: msg}
	}
	inputs, err := o.data.read()
	unreadable += printErrors(stderr, err)
	resourcesOut, err := newResourceOutput(cmd.OutOrStdout(), o.resourcesOut)
	if err != nil {
		return exitError{code: exitCouldNotRun, msg: err.Error()}
	}
	requestFor := func(obj map[string]any) *engine.Request {
		req := exceptions.Request(obj)
		req.Background = true
		inputs.request(req, obj)
		if live != nil {
			live.request(req, report.SubjectOf(obj).Namespace)
		}
		return req
	}
	var out []applied
	var summary wgv1alpha2.PolicyReportSummary
	for _, trigger := range resources {
		// As Kyverno's CLI: the mutate rules first, each policy on what the
		// one before produced, then every other rule on the mutated resource.
		res := trigger
		for _, p := range policies {
			if !p.MutatesClassic() {
				continue
			}
			patched, _ := p.MutateClassic(cmd.Context(), requestFor(res))
			if err := resourcesOut.mutated(p.Name, trigger, patched); err != nil {
				return exitError{code: exitCouldNotRun, msg: "-o: " + err.Error()}
			}
			res = patched
		}
		req := requestFor(res)
		for _, p := range policies {
			var generated []map[string]any
			for _, g := range p.GenerateClassic(cmd.Context(), req, nil) {
				generated = append(generated, g.Generated...)
			}
			if g, ok := p.GenerateCEL(cmd.Context(), req); ok {
				generated = append(generated, g.Generated...)
			}
			for _, obj := range generated {
				if err := resourcesOut.generated(p.Name, res, obj); err != nil {
					return exitError{code: exitCouldNotRun, msg: "-o: " + err.Error()}
				}
			}
		}
		ns := report.SubjectOf(res).Namespace
		for _, p := range policies {
			rs := evaluateForApply(cmd.Context(), p, req)
			for i := range rs {
				if o.auditWarn && rs[i].Result == engine.Fail && rs[i].Source == "" && !p.Enforced(rs[i].Rule, ns, nil) {
					rs[i].Result = engine.Warn
				}
				summary.Add(rs[i].Result)
			}
			if len(rs) > 0 {
				out = append(out, applied{resource: res, policy: p, results: rs})
			}
		}
	}
	if o.policyReport {
		err = printReports(cmd.OutOrStdout(), o.output, reportAPI, out, o.clock.Now())
	} else {
		err = printResults(cmd.OutOrStdout(), o.output, out, o.detailed)
	}
	if err != nil {
		return err
	}
	switch {
	case invalid > 0:
		// The valid policies were applied and printed; the refused ones
		// make the run fail.
		return exitError{code: exitCouldNotRun, msg: refused(invalid)}
	case unreadable > 0:
		return exitError{code: exitCouldNotRun, msg: plural(unreadable, "input", "inputs") + " could not be used (see above)"}
	case summary.Fail > 0 || summary.Error > 0:
		return exitError{code: exitCouldNotRun, msg: fmt.Sprintf("%d failed, %d erred", summary.Fail, summary.Error)}
	case summary.Warn > 0 && o.warnExitCode != 0:
		return exitError{code: o.warnExitCode}
	}
	return nil
}

// applyInputs reads the values file, --set and the user info file.
func (o dataOptions) read() (*dataInputs, error) {
	in := &dataInputs{}
	var errs []error
	if o.valuesFile != "" {
		v, err := tester.ReadValues(o.valuesFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("--values-file: %w", err))
		}
		in.values = v
	}
	set := map[string]any{}
	for _, kv := range o.set {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			errs = append(errs, fmt.Errorf("--set %q: want key=value", kv))
			continue
		}
		set[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	in.values = tester.WithGlobalValues(in.values, set)
	if o.userInfo != "" {
		u, err := tester.ReadUserInfo(o.userInfo)
		if err != nil {
			errs = append(errs, fmt.Errorf("--userinfo: %w", err))
		}
		in.user = u
	}
	cluster, err := tester.ReadContext(o.contextFiles...)
	if err != nil {
		errs = append(errs, fmt.Errorf("--context-file: %w", err))
	}
	in.cluster = cluster
	in.images = imageVerifier(o.registry, o.registryQPS, o.trustedRoot)
	in.registry = registryReader(o.registry)
	return in, errors.Join(errs...)
}

// printErrors prints each error joined in err on a line of its own and
// returns how many there were.
func printErrors(w io.Writer, err error) int {
	errs := flatten(err)
	for _, e := range errs {
		fmt.Fprintln(w, "error:", e)
	}
	return len(errs)
}

// flatten lists the errors joined (errors.Join) in err, depth first.
func flatten(err error) []error {
	if err == nil {
		return nil
	}
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range joined.Unwrap() {
		out = append(out, flatten(e)...)
	}
	return out
}

// countErrors counts the errors joined in err that are a T.
func countErrors[T error](err error) int {
	n := 0
	for _, e := range flatten(err) {
		var target T
		if errors.As(e, &target) {
			n++
		}
	}
	return n
}

// reportList is the List -o yaml and -o json print reports in.
func reportList(objs []any) map[string]any {
	if objs == nil {
		objs = []any{}
	}
	return map[string]any{"apiVersion": "v1", "kind": "List", "items": objs}
}

// readStdin reads the resource manifests of standard input.
func readStdin(r io.Reader) ([]tester.Document, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("standard input: %w", err)
	}
	docs, err := tester.DecodeDocuments("-", data)
	if err != nil {
		return nil, err
	}
	return tester.Objects(docs)
}

// printResults prints the results (without detailed, only those that did
// not pass or skip) and a summary line.
func printResults(w io.Writer, format string, out []applied, detailed bool) error {
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
			summary.Add(r.Result)
			if detailed || format == "json" || format == "yaml" || (r.Result != engine.Pass && r.Result != engine.Skip) {
				rows = append(rows, row{Resource: name, RuleResult: r})
			}
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

// printReports prints the results as Kyverno's CLI does with -p: one
// ClusterPolicyReport named "merged" holding the results of the
// cluster-wide policies, each result naming its resource, then one
// PolicyReport per namespaced policy (Policy, NamespacedValidatingPolicy),
// named after it. YAML documents are separated by "---"; JSON is one
// object after the other. The merged report is printed even when empty,
// so that there is always a report to read.
func printReports(w io.Writer, format string, api report.API, out []applied, now time.Time) error {
	switch format {
	case "yaml", "table", "":
		format = "yaml"
	case "json":
	default:
		return exitError{code: exitCouldNotRun, msg: fmt.Sprintf("unknown output %q (want yaml or json)", format)}
	}
	objs, err := policyReports(api, out, now)
	if err != nil {
		return err
	}
	for i, obj := range objs {
		if i > 0 && format == "yaml" {
			if _, err := io.WriteString(w, "---\n"); err != nil {
				return err
			}
		}
		if err := encode(w, format, obj); err != nil {
			return err
		}
	}
	return nil
}

// policyReports builds the reports printReports prints.
func policyReports(api report.API, out []applied, now time.Time) ([]any, error) {
	type namespaced struct{ namespace, name string }
	var merged []wgv1alpha2.PolicyReportResult
	byPolicy := map[namespaced][]wgv1alpha2.PolicyReportResult{}
	var order []namespaced
	for _, a := range out {
		scope := report.Scope(report.SubjectOf(a.resource))
		for _, r := range a.results {
			res := report.Result(a.policy, r, report.ProcessBackground, now)
			res.Resources = []corev1.ObjectReference{*scope}
			if a.policy.Namespace == "" {
				merged = append(merged, res)
				continue
			}
			_, name, _ := strings.Cut(a.policy.Name, "/")
			key := namespaced{a.policy.Namespace, name}
			if _, ok := byPolicy[key]; !ok {
				order = append(order, key)
			}
			byPolicy[key] = append(byPolicy[key], res)
		}
	}
	objs := []any{&wgv1alpha2.ClusterPolicyReport{
		TypeMeta:   metav1.TypeMeta{APIVersion: wgv1alpha2.GroupVersion.String(), Kind: "ClusterPolicyReport"},
		ObjectMeta: metav1.ObjectMeta{Name: "merged"},
		Summary:    wgv1alpha2.SummaryOf(merged),
		Results:    merged,
	}}
	for _, key := range order {
		results := byPolicy[key]
		objs = append(objs, &wgv1alpha2.PolicyReport{
			TypeMeta:   metav1.TypeMeta{APIVersion: wgv1alpha2.GroupVersion.String(), Kind: "PolicyReport"},
			ObjectMeta: metav1.ObjectMeta{Name: key.name, Namespace: key.namespace},
			Summary:    wgv1alpha2.SummaryOf(results),
			Results:    results,
		})
	}
	if api != report.APIOpenReports {
		return objs, nil
	}
	// The openreports.io kinds have the same fields: the objects are
	// converted through JSON and retyped.
	for i, obj := range objs {
		data, err := json.Marshal(obj)
		if err != nil {
			return nil, err
		}
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			return nil, err
		}
		ns := ""
		if i > 0 {
			ns = order[i-1].namespace
		}
		m["apiVersion"], m["kind"] = api.TypeMeta(ns)
		objs[i] = m
	}
	return objs, nil
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

// evaluateForApply evaluates a policy as Kyverno's apply does: a
// MutatingPolicy is applied (pass when its mutations apply, skip when its
// match conditions are not met, error when one cannot be applied), not
// checked as the background scan checks it ("mutation is not applied" is
// a report's finding about a resource in the cluster).
func evaluateForApply(ctx context.Context, p *engine.Policy, req *engine.Request) []engine.RuleResult {
	if !p.Mutating() {
		return p.Evaluate(ctx, req)
	}
	if _, r, matched := p.Mutate(ctx, req); matched {
		return []engine.RuleResult{r}
	}
	return nil
}
