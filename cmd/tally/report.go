package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tally-dev/tally/api/apiresources"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/report"
	"github.com/tally-dev/tally/tester"
)

// newDynamicClient builds the client of a live cluster (replaced in tests).
var newDynamicClient = func(kubeconfig string) (dynamic.Interface, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return dynamic.NewForConfig(cfg)
}

// exportColumns are the fields of one exported row, in CSV order.
var exportColumns = []string{"namespace", "kind", "name", "uid", "policy", "rule", "result", "severity", "category", "message", "timestamp", "source"}

// exportRow is one result about one resource.
type exportRow struct {
	Namespace string `json:"namespace"`
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	Policy    string `json:"policy"`
	Rule      string `json:"rule"`
	Result    string `json:"result"`
	Severity  string `json:"severity"`
	Category  string `json:"category"`
	Message   string `json:"message"`
	Timestamp string `json:"timestamp"`
	Source    string `json:"source"`
}

func (r exportRow) fields() []string {
	return []string{r.Namespace, r.Kind, r.Name, r.UID, r.Policy, r.Rule, r.Result, r.Severity, r.Category, r.Message, r.Timestamp, r.Source}
}

type exportOptions struct {
	format        string
	kubeconfig    string
	namespace     string
	allNamespaces bool
	policies      []string
	results       []string
	from          string
}

func newReportCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "report",
		Short: "Read policy reports",
	}
	cmd.AddCommand(newReportExportCommand())
	return cmd
}

func newReportExportCommand() *cobra.Command {
	var o exportOptions
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Export every result of the PolicyReports and ClusterPolicyReports as CSV or JSON",
		Long: `Read the PolicyReports and ClusterPolicyReports of a live cluster (or, with
--from, report files such as the output of 'tally scan -o yaml|json' or
'kubectl get polr -o yaml') and write one row per result, for auditors:
namespace, kind, name, uid (of the resource), policy, rule, result, severity,
category, message, timestamp (RFC 3339) and source.

Without -n, every namespace's PolicyReports and the ClusterPolicyReports are
read; -n NAMESPACE reads that namespace's PolicyReports only.`,
		Example: `  tally report export --format csv -A --result fail,warn > findings.csv
  tally report export --format json -n prod --policy disallow-privileged-containers
  tally scan config/samples -o yaml > reports.yaml && tally report export --from reports.yaml --format csv`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := runExport(cmd.Context(), cmd.OutOrStdout(), o); err != nil {
				return exitError{code: exitCouldNotRun, msg: err.Error()}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.format, "output", "o", "csv", "output format: csv, json (an array) or jsonl (one object a line)")
	f.StringVar(&o.format, "format", "csv", "alias of --output")
	_ = f.MarkHidden("format") // errs only for a flag not defined just above
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	f.StringVarP(&o.namespace, "namespace", "n", "", "read only this namespace's PolicyReports")
	f.BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "read every namespace and the ClusterPolicyReports (the default)")
	f.StringSliceVar(&o.policies, "policy", nil, "export only these policies (comma-separated; a namespaced Policy as NAMESPACE/NAME)")
	f.StringSliceVar(&o.results, "result", nil, "export only these results (comma-separated: pass, fail, warn, error, skip)")
	f.StringVar(&o.from, "from", "", "read report files (a YAML/JSON file or a folder of them) instead of a cluster")
	return cmd
}

func runExport(ctx context.Context, w io.Writer, o exportOptions) error {
	switch o.format {
	case "csv", "json", "jsonl":
	default:
		return fmt.Errorf("unknown --format %q (want csv, json or jsonl)", o.format)
	}
	if o.namespace != "" && o.allNamespaces {
		return fmt.Errorf("-n/--namespace and -A/--all-namespaces exclude each other")
	}
	if o.from != "" && o.kubeconfig != "" {
		return fmt.Errorf("--from and --kubeconfig exclude each other: read files or a cluster")
	}
	results := map[string]bool{}
	for _, r := range o.results {
		switch v := wgv1alpha2.Result(strings.TrimSpace(r)); v {
		case wgv1alpha2.ResultPass, wgv1alpha2.ResultFail, wgv1alpha2.ResultWarn, wgv1alpha2.ResultError, wgv1alpha2.ResultSkip:
			results[string(v)] = true
		default:
			return fmt.Errorf("--result: %q is not one of pass, fail, warn, error, skip", r)
		}
	}
	policies := map[string]bool{}
	for _, p := range o.policies {
		if p = strings.TrimSpace(p); p != "" {
			policies[p] = true
		}
	}

	var reports []map[string]any
	var err error
	if o.from != "" {
		reports, err = readReportFiles(o.from)
	} else {
		reports, err = listReports(ctx, o.kubeconfig, o.namespace)
	}
	if err != nil {
		return err
	}
	var rows []exportRow
	for _, obj := range reports {
		var r wgv1alpha2.PolicyReport // a ClusterPolicyReport has the same fields
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &r); err != nil {
			return fmt.Errorf("read %s %s/%s: %w", obj["kind"], r.Namespace, r.Name, err)
		}
		if o.namespace != "" && r.Namespace != o.namespace {
			continue
		}
		for _, row := range rowsOf(&r) {
			if (len(results) > 0 && !results[row.Result]) || (len(policies) > 0 && !policies[row.Policy]) {
				continue
			}
			rows = append(rows, row)
		}
	}
	sort.SliceStable(rows, func(i, j int) bool {
		a, b := rows[i].fields(), rows[j].fields()
		for k := range 6 { // namespace, kind, name, uid, policy, rule
			if a[k] != b[k] {
				return a[k] < b[k]
			}
		}
		return false
	})
	return writeRows(w, o.format, rows)
}

// rowsOf makes the rows of one report: its subject is its scope, or, in
// reports without one, each result's resources.
func rowsOf(r *wgv1alpha2.PolicyReport) []exportRow {
	var rows []exportRow
	for _, res := range r.Results {
		base := exportRow{
			Policy: res.Policy, Rule: res.Rule, Result: string(res.Result), Severity: string(res.Severity),
			Category: res.Category, Message: res.Message, Source: res.Source, Timestamp: rfc3339(res.Timestamp),
		}
		subjects := res.Resources
		if r.Scope != nil {
			subjects = []corev1.ObjectReference{*r.Scope}
		}
		if len(subjects) == 0 {
			base.Namespace = r.Namespace
			rows = append(rows, base)
			continue
		}
		for _, s := range subjects {
			row := base
			row.Namespace, row.Kind, row.Name, row.UID = s.Namespace, s.Kind, s.Name, string(s.UID)
			if row.Namespace == "" {
				row.Namespace = r.Namespace
			}
			rows = append(rows, row)
		}
	}
	return rows
}

func rfc3339(t metav1.Timestamp) string {
	if t.Seconds == 0 && t.Nanos == 0 {
		return ""
	}
	return time.Unix(t.Seconds, int64(t.Nanos)).UTC().Format(time.RFC3339)
}

func writeRows(w io.Writer, format string, rows []exportRow) error {
	switch format {
	case "csv":
		cw := csv.NewWriter(w)
		if err := cw.Write(exportColumns); err != nil {
			return err
		}
		for _, r := range rows {
			if err := cw.Write(r.fields()); err != nil {
				return err
			}
		}
		cw.Flush()
		return cw.Error()
	case "jsonl":
		enc := json.NewEncoder(w)
		for _, r := range rows {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	default:
		if rows == nil {
			rows = []exportRow{} // an empty array, not null
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
}

// listReports reads the reports of a live cluster, page by page.
func listReports(ctx context.Context, kubeconfig, namespace string) ([]map[string]any, error) {
	client, err := newDynamicClient(kubeconfig)
	if err != nil {
		return nil, err
	}
	kinds := []schema.GroupVersionResource{apiresources.PolicyReport, apiresources.ClusterPolicyReport}
	if namespace != "" {
		kinds = kinds[:1]
	}
	var out []map[string]any
	for _, gvr := range kinds {
		opts := metav1.ListOptions{Limit: 500}
		ns := namespace
		if gvr == apiresources.ClusterPolicyReport {
			ns = ""
		}
		for {
			list, err := client.Resource(gvr).Namespace(ns).List(ctx, opts)
			if err != nil {
				return nil, fmt.Errorf("list %s: %w", gvr.Resource, err)
			}
			for i := range list.Items {
				out = append(out, list.Items[i].Object)
			}
			if opts.Continue = list.GetContinue(); opts.Continue == "" {
				break
			}
		}
	}
	return out, nil
}

// readReportFiles reads the PolicyReports and ClusterPolicyReports of a
// file, or of every .yaml, .yml and .json file under a folder; Lists are
// unwrapped and other kinds ignored.
func readReportFiles(path string) ([]map[string]any, error) {
	var files []string
	err := filepath.WalkDir(path, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == path && !d.IsDir() {
			files = append(files, p)
			return nil
		}
		if !d.IsDir() && tester.IsManifest(p) {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("--from: %w", err)
	}
	sort.Strings(files)
	var out []map[string]any
	for _, f := range files {
		docs, err := tester.ReadDocuments(f)
		if err != nil {
			return nil, fmt.Errorf("--from: %w", err)
		}
		for _, d := range docs {
			kind, _ := d.Object["kind"].(string)
			apiVersion, _ := d.Object["apiVersion"].(string)
			wg := (kind == "PolicyReport" || kind == "ClusterPolicyReport") && strings.HasPrefix(apiVersion, wgv1alpha2.GroupVersion.Group+"/")
			or := (kind == "Report" || kind == "ClusterReport") && strings.HasPrefix(apiVersion, report.OpenReportsGroupVersion.Group+"/")
			if wg || or {
				out = append(out, d.Object)
			}
		}
	}
	return out, nil
}
