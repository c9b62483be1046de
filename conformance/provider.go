package conformance

import (
	"context"
	"errors"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
)

// Capabilities a provider may offer; cases list those they need.
const (
	CanRescan           = "rescan"
	CanRestartScanner   = "restart-scanner"
	CanRestartMerger    = "restart-merger"
	CanRestartAPIServer = "restart-apiserver"
	CanFailoverMerger   = "failover-merger"
	CanMetrics          = "metrics"
	// CanTallyWebhook: tally's own admission webhook answers the requests.
	CanTallyWebhook = "tally-webhook"
	// CanIngest: a Kyverno admission controller answers them, and tally
	// ingests its EphemeralReports.
	CanIngest = "ingest-kyverno-reports"
	// CanTally: the implementation under test is tally; a case marked as a
	// tally extension counts as a failure only then.
	CanTally = "tally"
	// CanWebhookClientAuth: tally's webhook accepts only callers presenting
	// the client certificate the API server presents (tally-scanner
	// --webhook-client-ca): a forged review is refused at the handshake.
	CanWebhookClientAuth = "webhook-client-auth"
	// CanFaultInject: tally's daemons are built with the faultinject tag
	// (internal/fault), so a case can make an evaluation panic.
	CanFaultInject = "fault-inject"
	// CanShards: several scanner pairs divide the namespaces (tally-scanner
	// --sharding), and Restart changes them (replica-killed, replica-added,
	// replicas-rolled).
	CanShards = "shards"
	// CanExceptionNamespace: PolicyExceptions are taken from the namespace
	// conf-policy-exceptions only, as Kyverno's --exceptionNamespace
	// (tally-scanner --exception-namespace).
	CanExceptionNamespace = "exception-namespace"
	// CanTenantExceptions: PolicyExceptions of every namespace are taken,
	// those of conf-policy-exceptions reaching every namespace, any other
	// only its own (tally-scanner --cluster-exception-namespaces, the
	// chart's default of no exception namespace: issue 53).
	CanTenantExceptions = "tenant-exceptions"
)

// ManagedByLabeler is a provider that knows the app.kubernetes.io/managed-by
// value the final reports must carry (tally standalone: tally; beside
// Kyverno: kyverno).
type ManagedByLabeler interface {
	ManagedBy() string
}

// ReportStore is a provider whose report kinds are stored outside the
// cluster's etcd (reports-server, an aggregated API server): every final
// report the suite reads must carry the annotation the store sets on what it
// serves, key: value (key "" when the cluster stores them itself).
type ReportStore interface {
	StoredBy() (key, value string)
}

// ReviewForger is a provider that can post an AdmissionReview straight to
// tally's webhook, as another Pod of the cluster could (without the API
// server's client certificate). ForgeReview returns an error wrapping
// ErrForgeryRefused when the webhook refused the connection, another error
// when the review could not be sent or was not answered with HTTP 200.
type ReviewForger interface {
	ForgeReview(ctx context.Context, review []byte) error
}

// ErrForgeryRefused: the webhook refused a forged review's connection
// (it authenticates its callers).
var ErrForgeryRefused = errors.New("the webhook refused the connection")

// MetricsSource is a provider that can read a component's Prometheus
// metrics (text exposition format).
type MetricsSource interface {
	Metrics(ctx context.Context, component string) ([]byte, error)
}

// ErrUnsupported is returned by a provider asked for something it cannot do.
var ErrUnsupported = errors.New("not supported by this provider")

// Provider is a cluster with a policy-reporting implementation running in
// it: tally started as local processes, tally deployed on kind, or any
// cluster reached through a kubeconfig (tally's or Kyverno's).
type Provider interface {
	// Name names the provider in output.
	Name() string
	// Config is an admin client configuration of the cluster.
	Config() *rest.Config
	// Can reports whether the provider offers a capability.
	Can(capability string) bool
	// Rescan forces a full background scan.
	Rescan(ctx context.Context) error
	// Restart restarts a component ("scanner", "merger", "apiserver") and
	// returns once it serves again.
	Restart(ctx context.Context, component string) error
	// Failover stops the active replica of a component so that a standby
	// takes over, and starts a new standby.
	Failover(ctx context.Context, component string) error
	// PolicyLoaded reports whether the implementation evaluates the given
	// version of a policy, both at admission and in background scans.
	PolicyLoaded(ctx context.Context, policy *unstructured.Unstructured) (bool, error)
}

// AdmissionCoverer is implemented by a provider beside an admission
// controller that starts sending a policy's requests some time after the
// policy is created (the real Kyverno): the runner waits with it for the
// policies tally does not load itself (GeneratingPolicies), whose results
// only that controller gives.
type AdmissionCoverer interface {
	AdmissionCovered(ctx context.Context, policy *unstructured.Unstructured) bool
}

// StatusReady is the portable PolicyLoaded check: the policy's status has a
// Ready condition that is True and, when the implementation records it,
// observed the policy's current generation (Kyverno and tally both write it).
func StatusReady(policy *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(policy.Object, statusPath(policy, "conditions")...)
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok || m["type"] != "Ready" {
			continue
		}
		if m["status"] != "True" {
			return false
		}
		if og, ok := m["observedGeneration"].(int64); ok && og != policy.GetGeneration() {
			return false
		}
		return true
	}
	ready, _, _ := unstructured.NestedBool(policy.Object, statusPath(policy, "ready")...)
	return ready
}

// statusPath is the path of a field of a policy's status: under
// status.conditionStatus for a CEL policy, where Kyverno keeps it.
func statusPath(policy *unstructured.Unstructured, field string) []string {
	if strings.HasPrefix(policy.GetAPIVersion(), "policies.kyverno.io/") {
		return []string{"status", "conditionStatus", field}
	}
	return []string{"status", field}
}
