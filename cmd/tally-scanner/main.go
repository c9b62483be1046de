// Command tally-scanner is tally's scan engine: it keeps the store in step
// with the cluster, evaluates the background-enabled rules and hands
// BackgroundScanReports to the merger beside it (for the namespaces of its
// shard; with --sharding=false, of everything while leading). Every
// replica also serves the admission bridge (--webhook-listen), outside
// leader election and sharding. It parses its flags into
// pair.ScannerOptions and runs pair.RunScanner.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2/textlogger"

	"github.com/tally-dev/tally/controllers/data"
	"github.com/tally-dev/tally/controllers/pair"
	"github.com/tally-dev/tally/controllers/policyevents"
	"github.com/tally-dev/tally/controllers/scan"
	"github.com/tally-dev/tally/internal/egress"
	"github.com/tally-dev/tally/internal/process"
	"github.com/tally-dev/tally/report"
)

// options are tally-scanner's flags: the pair's scanner options.
type options struct{ pair.ScannerOptions }

func main() {
	o := bindFlags(flag.CommandLine)
	process.ParseFlags("tally-scanner", "tally-scanner scans the cluster's resources against Kyverno policies in the background and serves the admission\nbridge, writing one AdmissionReport per admitted resource and handing one BackgroundScanReport per resource to\nthe merger beside it (--handover-listen).", flag.CommandLine, os.Args[1:])

	if err := o.check(); err != nil {
		fmt.Fprintf(os.Stderr, "Error: %v\nRun 'tally-scanner --help' for usage.\n", err)
		os.Exit(2)
	}
	log := textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(o.Verbosity)))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := pair.RunScanner(logr.NewContext(ctx, log), o.ScannerOptions)
	stop()
	if err != nil {
		log.Error(err, "tally-scanner failed")
		os.Exit(1)
	}
}

// bindFlags binds tally-scanner's flags to the options they set.
func bindFlags(fs *flag.FlagSet) *options {
	o := &options{}
	o.Bind(fs, "tally-scanner")
	fs.IntVar(&o.Workers, "workers", 2, "resources evaluated in parallel")
	fs.DurationVar(&o.Interval, "background-scan-interval", time.Hour, "global background scan interval (policies may override it)")
	fs.DurationVar(&o.EvalTimeout, "evaluation-timeout", scan.DefaultEvalTimeout, "time limit of one resource's background evaluation; past it the rules left are error results and the worker moves on")
	fs.StringVar(&o.StateConfigMap, "state-configmap", "tally-scan-state", "ConfigMap persisting each policy's last complete scan")
	fs.BoolVar(&o.PolicyStatus, "policy-status", true, "keep each policy's Ready condition (turn off beside a Kyverno that writes it)")
	fs.BoolVar(&o.SuccessEvents, "generate-success-events", false, "also emit an Event (Normal, PolicyApplied) on a policy when its results on a resource pass, as Kyverno's generateSuccessEvents; violations always get one (Warning, PolicyViolation) on the policy and the resource, in the background once per change to fail")
	fs.Func("omit-events", "comma-separated reasons of result Events not to emit, as Kyverno's omitEvents: PolicyViolation, PolicyApplied (PolicyError and PolicySkipped are accepted; tally emits neither)", func(v string) error {
		omit, err := policyevents.ParseOmit(v)
		o.OmitEvents = omit
		return err
	})
	fs.Func("http-allow", "URL patterns (* and ? wildcards; comma-separated, repeatable) of the services policies may call: apiCall.service entries and CEL's http.Get/Post; none by default", func(v string) error {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				o.HTTP.Allow = append(o.HTTP.Allow, p)
			}
		}
		return nil
	})
	fs.DurationVar(&o.HTTP.Timeout, "http-timeout", data.DefaultHTTPTimeout, "time limit of one call to a service")
	fs.BoolVar(&o.Images.Enabled, "registry-access", false, "let policies read image registries (imageRegistry context entries, CEL's image.GetMetadata); each image digest is read once")
	fs.Func("image-pull-secrets", "pull secrets (in --namespace; comma-separated, repeatable) for registry reads, besides those an entry names; grant tally-scanner get on them", func(v string) error {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				o.Images.PullSecrets = append(o.Images.PullSecrets, p)
			}
		}
		return nil
	})
	fs.BoolVar(&o.ImageVerify.Verify, "verify-images", true, "verify the images of verifyImages rules in background scans and at admission (cosign signatures and attestations; the registries are asked, each image digest once per rule and --image-verify-cache-ttl); off, those rules are skipped and say so")
	fs.Func("registry-deny-cidrs", "addresses (CIDRs, comma-separated, repeatable) of registries the scanner never connects to, besides loopback, link-local (the metadata service) and the cluster's Service and Pod ranges (read from its ServiceCIDRs and Nodes), which are always refused", func(v string) error {
		p, err := egress.ParsePrefixes(v)
		o.ImageVerify.DenyCIDRs = append(o.ImageVerify.DenyCIDRs, p...)
		return err
	})
	fs.Func("registry-allow-cidrs", "addresses (CIDRs, or address:port for one port only; comma-separated, repeatable) of registries the scanner may connect to although refused otherwise (a registry served inside the cluster, on a Service or Pod address)", func(v string) error {
		p, ports, err := egress.ParseAllowed(v)
		o.ImageVerify.AllowCIDRs = append(o.ImageVerify.AllowCIDRs, p...)
		o.ImageVerify.AllowPorts = append(o.ImageVerify.AllowPorts, ports...)
		return err
	})
	fs.StringVar(&o.ImageVerify.TrustedRoot, "sigstore-trusted-root", "", "a Sigstore trusted_root.json (cosign's --trusted-root) that keyless signatures without roots of their own, and attestations without attestors, are verified against (default: the public Sigstore root, read from its TUF repository, as Kyverno's)")
	fs.BoolVar(&o.ImageVerify.PodPullSecrets, "pod-image-pull-secrets", false, "verify images with the credentials of the resource's own imagePullSecrets (read from its namespace, as the kubelet pulls them; the scanner needs get on Secrets in every namespace: config/components/pod-image-pull-secrets, the chart's scanner.podImagePullSecrets)")
	fs.DurationVar(&o.ImageVerify.CacheTTL, "image-verify-cache-ttl", time.Hour, "how long a verified image is not verified again, as Kyverno's --imageVerifyCacheTTLDuration")
	fs.StringVar(&o.Handover.Listen, "handover-listen", "127.0.0.1:8095", "loopback address where the merger beside the scanner reads the BackgroundScanReports (kyverno.io/v2 list and watch; kubectl --server http://<address> get bgscanr -A shows them)")
	fs.StringVar(&o.Handover.ReportAPI, "report-api", string(report.APIWGPolicy), "the API of the final reports the merger writes (wgpolicyk8s or openreports): the scanner reads its results back from them after a restart")
	fs.StringVar(&o.Handover.ManagedBy, "managed-by", report.ManagedBy, "the app.kubernetes.io/managed-by label of the final reports the merger writes (the merger's --managed-by)")
	fs.IntVar(&o.MaxQueuedEvents, "max-queued-events", policyevents.DefaultMaxQueuedEvents, "result Events that may wait to be sent; past it new ones are dropped (tally_events_dropped_total), as Kyverno's --maxQueuedEvents")
	fs.Float64Var(&o.EventsQPS, "events-qps", policyevents.DefaultEventsQPS, "result Events sent a second at most (below --kube-api-qps, the rate limit of their client)")
	fs.BoolVar(&o.Sharding, "sharding", true, "divide the namespaces among the live replicas through a membership Lease each (tally-member-<identity>): each replica scans, and its merger writes, only its shard (as the chart runs); --sharding=false: one replica leads (--leader-elect) and the others wait")
	fs.StringVar(&o.ShardGroup, "shard-group", "tally-scanner", "the replicas that shard together (the tally.dev/shard-member label of their Leases)")
	fs.StringVar(&o.PodUID, "pod-uid", "", "with --sharding, the UID of the Pod this replica runs in, whose name is --identity: the Pod owns the membership Lease, and the garbage collector deletes the Lease of a Pod deleted without warning")
	fs.BoolVar(&o.MAPReports, "mutating-admission-policy-reports", false, "report MutatingAdmissionPolicies in background scans (pass when applied, fail \"mutation is not applied\"), as Kyverno's --mutatingAdmissionPolicyReports; needs the API server to serve admissionregistration.k8s.io/v1beta1 MutatingAdmissionPolicies")
	fs.StringVar(&o.Exceptions.Namespace, "exception-namespace", "", "the one namespace PolicyExceptions are taken from, as Kyverno's --exceptionNamespace (empty or *: every namespace, Kyverno's default); exceptions elsewhere are ignored, with a Warning Event and tally_scan_exceptions_ignored_total; its exceptions reach every namespace")
	fs.Func("cluster-exception-namespaces", "the namespaces (comma-separated, repeatable) whose PolicyExceptions may exempt resources of every namespace: the platform's; an exception of any other namespace exempts only resources of its own namespace (a tenant's exempts nothing of another tenant); * for every namespace, Kyverno's behaviour", func(v string) error {
		for _, ns := range strings.Split(v, ",") {
			if ns = strings.TrimSpace(ns); ns != "" {
				if ns != "*" && len(validation.IsDNS1123Label(ns)) > 0 {
					return fmt.Errorf("%q is not a namespace name", ns)
				}
				o.Exceptions.Wide = append(o.Exceptions.Wide, ns)
			}
		}
		return nil
	})
	fs.StringVar(&o.TenantServiceAccount, "tenant-service-account", data.DefaultTenantServiceAccount, "the ServiceAccount, in each namespace, whose identity tally takes (impersonates) for the cluster reads of that namespace's policies and PolicyExceptions (apiCall, configMap, CEL resource.Get/List, Secrets of image checks): RBAC then decides what they may read (docs/security.md); empty: namespaced policies read nothing of the cluster")
	fs.DurationVar(&o.TenantReadTimeout, "tenant-read-timeout", data.DefaultTenantReadTimeout, "time limit of one cluster read of a namespaced policy (the platform's have 30s)")
	fs.BoolVar(&o.RescanEndpoint, "rescan-endpoint", false, "serve POST /rescan, which forces a full rescan (for operators and benchmarks)")
	fs.StringVar(&o.Webhook.Listen, "webhook-listen", ":9443", "HTTPS address of the admission webhook (/validate); empty disables the admission bridge")
	fs.StringVar(&o.Webhook.CertDir, "webhook-cert-dir", "", "directory with the webhook's tls.crt and tls.key (and optionally ca.crt), reloaded when they change; empty: tally generates a CA and certificate")
	fs.StringVar(&o.Webhook.Secret, "webhook-secret", "tally-webhook-tls", "Secret (in --namespace) holding the generated webhook certificate, shared by every replica")
	fs.StringVar(&o.Webhook.DNSNames, "webhook-dns-names", "", "comma-separated DNS names of the generated certificate (default tally-webhook.<namespace>.svc,tally-webhook.<namespace>.svc.cluster.local; IP 127.0.0.1 is always included)")
	fs.StringVar(&o.Webhook.Configuration, "webhook-configuration", "tally", "ValidatingWebhookConfiguration whose webhooks get the CA bundle (skipped while absent)")
	fs.DurationVar(&o.Webhook.Timeout, "webhook-timeout", 8*time.Second, "time limit of one admission evaluation; past it the request is answered per the policies' failurePolicy")
	fs.StringVar(&o.Webhook.ClientCA, "webhook-client-ca", "", "PEM file of CAs: the webhook then requires a client certificate signed by one (configure the API server to present one: see README)")
	fs.BoolVar(&o.Webhook.RecordRecomputed, "webhook-record-background-results", false, "also write to AdmissionReports the admission results of policies with background on, which the background scan recomputes (by default only what a scan cannot recompute is written: results of policies with background off, and of kinds the scanner cannot read)")
	fs.BoolVar(&o.Webhook.ManageRules, "webhook-rules-from-policies", true, "keep the rules of --webhook-configuration's webhooks to the kinds the admission policies match (CREATE and UPDATE), plus kyverno.io policies; false leaves the rules as deployed")
	return o
}

// check refuses flags that cannot work together, naming them.
func (o *options) check() error {
	var errs []error
	if _, err := report.ParseAPI(o.Handover.ReportAPI); err != nil {
		errs = append(errs, fmt.Errorf("--report-api: %w", err))
	}
	if errs2 := validation.IsValidLabelValue(o.Handover.ManagedBy); o.Handover.ManagedBy == "" || len(errs2) > 0 {
		errs = append(errs, fmt.Errorf("--managed-by %q is not a label value: %s", o.Handover.ManagedBy, strings.Join(errs2, "; ")))
	}
	if o.Workers < 1 {
		errs = append(errs, fmt.Errorf("--workers %d: at least one worker evaluates", o.Workers))
	}
	if o.Interval <= 0 || o.EvalTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--background-scan-interval and --evaluation-timeout must be positive"))
	}
	if o.PodUID != "" && !o.Sharding {
		errs = append(errs, fmt.Errorf("--pod-uid owns the membership Lease of --sharding: not with --sharding=false"))
	}
	if o.Webhook.ClientCA != "" && o.Webhook.Listen == "" {
		errs = append(errs, fmt.Errorf("--webhook-client-ca authenticates the webhook's callers: the webhook is off (--webhook-listen is empty)"))
	}
	if ns := o.Exceptions.Namespace; ns != "" && ns != "*" && len(validation.IsDNS1123Label(ns)) > 0 {
		errs = append(errs, fmt.Errorf("--exception-namespace %q is not a namespace name (or * for every namespace)", ns))
	}
	return errors.Join(errs...)
}
