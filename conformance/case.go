package conformance

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// Cases are the suite's cases, embedded so that `tally conformance` carries
// them to any cluster.
//
//go:embed cases/*.yaml
var Cases embed.FS

// Case is one executable reporting rule check: the cluster state it starts
// from (Given), then steps of actions (When) and expectations (Then).
type Case struct {
	// Name is the file name without extension; it starts with the first
	// rule's ID (R07-matrix-enforce-existing).
	Name string `json:"-"`
	// Rules are the R-IDs of docs/reporting-rules.md the case checks.
	Rules []string `json:"rules"`
	// Description says what is checked, in one or two sentences.
	Description string `json:"description"`
	// Needs lists the provider capabilities the case relies on
	// ("rescan", "restart-scanner", "restart-merger", "restart-apiserver",
	// "failover-merger"); a provider without one skips the case, saying so.
	Needs []string `json:"needs,omitempty"`
	// Extension marks a case that checks a promise of tally's beyond what
	// Kyverno documents (or where Kyverno is known to fail): it runs on
	// tally as any case, and against another implementation a failure is
	// reported as "extension", not as a failure.
	Extension *Extension `json:"extension,omitempty"`
	// IntermediatesKept says why the case may end with an intermediate
	// report still in the API server (a forged review's AdmissionReport
	// waits --orphan-grace for the scan to catch up); every other case ends
	// with none of the case's resources (R20).
	IntermediatesKept string `json:"intermediatesKept,omitempty"`
	// Tenant, when set, is a namespace's admin (issue 39): the user
	// conf-tenant, bound to Kubernetes' admin role in that namespace (which
	// the roles of tally's chart, and Kyverno's, extend to namespaced
	// policies, exceptions and reports). Every object of that namespace the
	// case creates, changes or deletes, policies and rejected policies
	// included, is written as that user.
	Tenant *Tenant `json:"tenant,omitempty"`
	Given  Given   `json:"given"`
	Steps  []Step  `json:"steps"`
}

// Tenant names the namespace of a case's tenant.
type Tenant struct {
	Namespace string `json:"namespace"`
}

// TenantUser is the user a case's tenant acts as.
const TenantUser = "conf-tenant"

// Extension says why a case goes beyond Kyverno's documented behaviour.
type Extension struct {
	Reason string `json:"reason"`
	// Upstream names Kyverno issues about the behaviour, if any.
	Upstream []string `json:"upstream,omitempty"`
}

// ExtensionNote is the one-line account of a case's extension ("" if none).
func (c *Case) ExtensionNote() string {
	if c.Extension == nil {
		return ""
	}
	note := "tally extension: " + c.Extension.Reason
	if len(c.Extension.Upstream) > 0 {
		note += " (upstream: " + strings.Join(c.Extension.Upstream, ", ") + ")"
	}
	return note
}

// Given is the state before the first step. Namespaces are created first,
// then Resources (they exist before any policy: a background scan finds
// them), then Exceptions and Policies; the runner waits until the
// implementation has loaded the policies before the first step.
type Given struct {
	// CRDs are created first; the runner waits until each is Established.
	// They are deleted (with their objects) at the end.
	CRDs       []unstructured.Unstructured `json:"crds,omitempty"`
	Namespaces []Namespace                 `json:"namespaces,omitempty"`
	Resources  []unstructured.Unstructured `json:"resources,omitempty"`
	Exceptions []unstructured.Unstructured `json:"exceptions,omitempty"`
	Policies   []unstructured.Unstructured `json:"policies,omitempty"`
	// InvalidPolicies are created after Policies and stored (a cluster whose
	// policy webhook is off); the implementation must reject them, so the
	// runner does not wait for them to load.
	InvalidPolicies []unstructured.Unstructured `json:"invalidPolicies,omitempty"`
	// RejectedPolicies must be refused at creation with the reason, as
	// Kyverno's policy webhook does (and tally's, in standalone mode); the
	// runner creates them after Policies and checks that none is stored.
	RejectedPolicies []RejectedPolicy `json:"rejectedPolicies,omitempty"`
	// UnusablePolicies must never be evaluated, and the implementation
	// chooses how: a policy webhook refuses one at creation (Kyverno's
	// does, even for a policy that bypasses the local provider's webhook),
	// or it is stored and marked not Ready. The runner creates them after
	// Policies and waits for either.
	UnusablePolicies []UnusablePolicy `json:"unusablePolicies,omitempty"`
	// Bulk creates many copies of a resource (with the policies' existing
	// resources), named <name>-000, <name>-001, ...
	Bulk []Bulk `json:"bulk,omitempty"`
}

// Bulk is Count copies of Object.
type Bulk struct {
	Count  int                       `json:"count"`
	Object unstructured.Unstructured `json:"object"`
}

// Namespace is a namespace a case creates (and deletes at the end).
type Namespace struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels,omitempty"`
	// Unlabelled leaves out the label CaseLabel, which the local provider's
	// webhook configuration selects on: admission never sees the namespace.
	Unlabelled bool `json:"unlabelled,omitempty"`
}

// Step is a list of actions and what must hold after them.
type Step struct {
	Name string   `json:"name,omitempty"`
	When []Action `json:"when,omitempty"`
	Then Then     `json:"then"`
	// Within, when set (a Go duration), is how soon after the step's
	// actions its expectations must hold (instead of the runner's
	// Timeout): a promise of time, such as a report put right within
	// seconds, or another namespace's report not held back by a tenant.
	Within string `json:"within,omitempty"`
}

// Action is one thing done to the cluster; exactly one field is set.
type Action struct {
	// Create sends a CREATE request through the API server (admission).
	Create *Request `json:"create,omitempty"`
	// Update changes an existing object (an UPDATE request): the given
	// labels, annotations and top-level fields other than metadata and
	// status replace the object's.
	Update *Request `json:"update,omitempty"`
	// Apply creates or updates an object (policies, exceptions, namespaces).
	Apply *unstructured.Unstructured `json:"apply,omitempty"`
	// Delete deletes an object and waits until it is gone.
	Delete *Ref `json:"delete,omitempty"`
	// Exec sends a pods/exec request to a Pod (never reported, R13).
	Exec *Ref `json:"exec,omitempty"`
	// Scan forces a background scan where the provider can; elsewhere the
	// expectations simply wait for the implementation's own schedule.
	Scan bool `json:"scan,omitempty"`
	// Restart restarts a component: scanner, merger or apiserver; or,
	// where the scanner pairs shard the namespaces (the "shards"
	// capability), changes the pairs: replica-killed (one pair killed
	// without warning, not replaced), replica-added (one more pair),
	// replicas-rolled (each pair replaced by a new one, one at a time, as a
	// Deployment's rolling update does).
	Restart string `json:"restart,omitempty"`
	// Failover stops the active replica of a component (merger) so that a
	// standby takes over.
	Failover string `json:"failover,omitempty"`
	// Tamper changes the final report of a resource behind the
	// implementation's back, as whoever may write it could (the tenant,
	// in the tenant's namespace): every result set to Result with a time
	// in 2099, or, with Delete, the report deleted (R48).
	Tamper *Tamper `json:"tamper,omitempty"`
	// Forge posts AdmissionReviews straight to the webhook, over TLS, as
	// any Pod that reaches its Service could, without the client
	// certificate the API server presents. Nothing is stored; the case
	// checks the reports. Where the webhook authenticates its callers
	// (capability webhook-client-auth) every forged review must be refused
	// at the TLS handshake; elsewhere each must be answered.
	Forge *Forgery `json:"forge,omitempty"`
}

// Tamper is a change of a final report made by someone else than the
// implementation.
type Tamper struct {
	For    Ref    `json:"for"`
	Result string `json:"result,omitempty"`
	Delete bool   `json:"delete,omitempty"`
	// FieldManager is the field manager the edit names (default
	// conf-tamper): any client may name any, the implementation's own
	// included.
	FieldManager string `json:"fieldManager,omitempty"`
}

// Forgery is a review claiming to come from the API server.
type Forgery struct {
	// For is the existing object whose UID (and, by default, content) the
	// review claims.
	For Ref `json:"for"`
	// Object, when set, is the made-up content the review carries (with the
	// real object's UID); unset, the review carries the stored object as
	// it is (its content hash is the real one).
	Object *unstructured.Unstructured `json:"object,omitempty"`
	// OldObject, when set, is the oldObject of an UPDATE; unset, the stored
	// object.
	OldObject *unstructured.Unstructured `json:"oldObject,omitempty"`
	// Operation is CREATE, UPDATE (the default) or DELETE.
	Operation string `json:"operation,omitempty"`
	// Username and Groups are the userInfo the review claims (default: a
	// service account of namespace conf, no groups).
	Username string   `json:"username,omitempty"`
	Groups   []string `json:"groups,omitempty"`
	// DryRun marks the review as a dry run.
	DryRun bool `json:"dryRun,omitempty"`
	// Count sends the review Count times (default 1), each with a content
	// of its own (a label tally.dev/forgery=<n> added to Object, if set).
	Count int `json:"count,omitempty"`
	// MadeUp sends as many more reviews, each for an object that does not
	// exist (name ghost-<n>, a made-up UID), with For's kind and namespace.
	MadeUp int `json:"madeUp,omitempty"`
	// DeleteReports, where the reviews are answered, deletes the admission
	// reports of For's UID as soon as they appear, for five seconds after
	// the reviews, as whoever may delete AdmissionReports could: a forged
	// review's report deleted before or after its merge.
	DeleteReports bool `json:"deleteReports,omitempty"`
}

// Request is an object sent through admission, and what the API server must
// answer.
type Request struct {
	Object unstructured.Unstructured `json:"object"`
	// DryRun sends the request with dryRun=All.
	DryRun bool `json:"dryRun,omitempty"`
	// Denied says the request must be rejected (by an Enforce policy).
	Denied bool `json:"denied,omitempty"`
	// MessageContains are substrings of the denial message, or of the
	// warnings when the request is allowed.
	MessageContains []string `json:"messageContains,omitempty"`
	// NoWarnings says the admitted request gets no warning (an Audit
	// failure of a policy without spec.emitWarning).
	NoWarnings bool `json:"noWarnings,omitempty"`
	// Copies, on a create, sends that many copies of Object back to back,
	// named <name>-000, <name>-001, ..., each answered as this request says
	// (a burst of admissions: issue 38).
	Copies int `json:"copies,omitempty"`
}

// RejectedPolicy is a policy whose creation is refused, with substrings of
// the refusal.
type RejectedPolicy struct {
	Policy          unstructured.Unstructured `json:"policy"`
	MessageContains []string                  `json:"messageContains,omitempty"`
}

// UnusablePolicy is a policy that is either refused at creation or stored
// and not Ready; either way the reason contains every MessageContains.
type UnusablePolicy struct {
	Policy unstructured.Unstructured `json:"policy"`
	// MessageContains are substrings of the refusal, or of the Ready
	// condition's message of a stored policy.
	MessageContains []string `json:"messageContains,omitempty"`
	// Event, when set, is the reason of an Event a stored policy must get,
	// its message containing MessageContains too (nothing is asked of a
	// refused one: it does not exist).
	Event string `json:"event,omitempty"`
}

// Ref names an object.
type Ref struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
}

func (r Ref) String() string {
	if r.Namespace == "" {
		return r.Kind + " " + r.Name
	}
	return r.Kind + " " + r.Namespace + "/" + r.Name
}

// RefOf names an object given as a manifest.
func RefOf(u *unstructured.Unstructured) Ref {
	return Ref{APIVersion: u.GetAPIVersion(), Kind: u.GetKind(), Namespace: u.GetNamespace(), Name: u.GetName()}
}

// Then is what must hold after a step's actions.
type Then struct {
	// Reports are expectations on final reports (PolicyReport or
	// ClusterPolicyReport, found through the resource's UID).
	Reports []ReportExpectation `json:"reports,omitempty"`
	// Intermediate are expectations on the intermediate reports of a
	// resource (AdmissionReport, BackgroundScanReport, ...).
	Intermediate []IntermediateExpectation `json:"intermediate,omitempty"`
	// Unchanged lists resources whose final report must not be rewritten by
	// this step (its resourceVersion stays as it was before the step).
	Unchanged []Ref `json:"unchanged,omitempty"`
	// Objects are expectations on the objects themselves.
	Objects []ObjectExpectation `json:"objects,omitempty"`
	// Metrics are expectations on an implementation's Prometheus metrics
	// (cases using them need the "metrics" capability).
	Metrics []MetricExpectation `json:"metrics,omitempty"`
	// Events are Kubernetes Events that must have been recorded about an
	// object (a rejected policy, a kind that cannot be read).
	Events []EventExpectation `json:"events,omitempty"`
	// Counts count the final reports of a namespace holding a result.
	Counts []CountExpectation `json:"counts,omitempty"`
	// Clients are clients of the reports that must show what the final
	// reports hold (cases using them need the client's capability).
	Clients []ClientExpectation `json:"clients,omitempty"`
}

// CountExpectation: exactly Reports final reports of the namespace hold one
// entry of the policy (and rule) with this result, and no report holds two
// entries for the same (policy, rule): nothing lost, nothing duplicated.
type CountExpectation struct {
	Namespace string `json:"namespace"`
	Policy    string `json:"policy"`
	Rule      string `json:"rule,omitempty"`
	Result    string `json:"result"`
	Reports   int    `json:"reports"`
}

// EventExpectation asks for an Event about an object.
type EventExpectation struct {
	For             Ref    `json:"for"`
	Reason          string `json:"reason"`
	MessageContains string `json:"messageContains,omitempty"`
	// Action, when set, is the Event's action (an events.k8s.io/v1 Event,
	// which then carries an eventTime too), e.g. "Resource Passed".
	Action string `json:"action,omitempty"`
	// ReportingController, when set, is the Event's reporting controller,
	// e.g. kyverno-admission.
	ReportingController string `json:"reportingController,omitempty"`
}

// MetricExpectation bounds the value of one series.
type MetricExpectation struct {
	// Component is scanner or merger.
	Component string            `json:"component"`
	Name      string            `json:"name"`
	Labels    map[string]string `json:"labels,omitempty"`
	// Min and Max bound the value; the series must exist.
	Min *float64 `json:"min,omitempty"`
	Max *float64 `json:"max,omitempty"`
	// Needs lists provider capabilities without which this expectation is
	// not checked (tally's own webhook, say).
	Needs []string `json:"needs,omitempty"`
}

// ObjectExpectation describes an object of the cluster (a resource that a
// scan must leave alone, a policy's status).
type ObjectExpectation struct {
	For Ref `json:"for"`
	// Exists, when set, says whether the object must exist.
	Exists *bool `json:"exists,omitempty"`
	// Labels must be present with these values.
	Labels map[string]string `json:"labels,omitempty"`
	// LabelsAbsent must not be present.
	LabelsAbsent []string `json:"labelsAbsent,omitempty"`
	// Conditions maps status condition types to their expected status
	// ("True", "False").
	Conditions map[string]string `json:"conditions,omitempty"`
	// Needs lists provider capabilities without which this expectation is
	// not checked (conditions only tally's scanner writes, say).
	Needs []string `json:"needs,omitempty"`
}

// ReportExpectation describes the final report of one resource.
type ReportExpectation struct {
	For Ref `json:"for"`
	// Needs lists provider capabilities without which this expectation is
	// not checked (a configuration's own promise: tally's webhook records
	// what Kyverno's drops, say).
	Needs []string `json:"needs,omitempty"`
	// Absent: the resource has no final report at all.
	Absent bool `json:"absent,omitempty"`
	// Results must each match one entry of the report.
	Results []ResultExpectation `json:"results,omitempty"`
	// Exact: the report holds nothing but entries matching Results (one
	// entry per expectation).
	Exact bool `json:"exact,omitempty"`
	// Summary, when set, must equal the report's summary.
	Summary map[string]int `json:"summary,omitempty"`
}

// ResultExpectation matches one result entry; empty fields match anything.
type ResultExpectation struct {
	Policy string `json:"policy"`
	Rule   string `json:"rule,omitempty"`
	Result string `json:"result,omitempty"`
	// Absent: no entry of this policy (and rule, if given) may exist.
	Absent          bool    `json:"absent,omitempty"`
	Message         *string `json:"message,omitempty"`
	MessageContains string  `json:"messageContains,omitempty"`
	// MessageContainsAll are more substrings the message must contain;
	// MessageExcludes substrings it must not (a value never read).
	MessageContainsAll []string          `json:"messageContainsAll,omitempty"`
	MessageExcludes    []string          `json:"messageExcludes,omitempty"`
	Scored             *bool             `json:"scored,omitempty"`
	Source             string            `json:"source,omitempty"`
	Category           *string           `json:"category,omitempty"`
	Severity           *string           `json:"severity,omitempty"`
	Properties         map[string]string `json:"properties,omitempty"`
}

// IntermediateExpectation counts the intermediate reports of a resource.
type IntermediateExpectation struct {
	For Ref `json:"for"`
	// Kind is AdmissionReport or BackgroundScanReport (the Cluster variant is
	// used for cluster-scoped resources).
	Kind string `json:"kind"`
	// Count is the number of such reports that must exist for the resource.
	Count int `json:"count"`
}

var ruleID = regexp.MustCompile(`^R[0-9]{2}$`)

// Load reads and checks every case of a folder (fs.FS); the first error of
// each file is reported, naming it, and the other cases still load.
func Load(fsys fs.FS, dir string) ([]*Case, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	var cases []*Case
	var errs []error
	for _, e := range entries {
		if e.IsDir() || (!strings.HasSuffix(e.Name(), ".yaml") && !strings.HasSuffix(e.Name(), ".yml")) {
			continue
		}
		data, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		c, err := Parse(strings.TrimSuffix(strings.TrimSuffix(e.Name(), ".yaml"), ".yml"), data)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", e.Name(), err))
			continue
		}
		cases = append(cases, c)
	}
	sort.Slice(cases, func(i, j int) bool { return cases[i].Name < cases[j].Name })
	return cases, errors.Join(errs...)
}

// Parse reads one case and checks it is well formed.
func Parse(name string, data []byte) (*Case, error) {
	var c Case
	if err := yaml.UnmarshalStrict(bytes.TrimSpace(data), &c); err != nil {
		return nil, fmt.Errorf("case %s: %w", name, err)
	}
	c.Name = name
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("case %s: %w", name, err)
	}
	return &c, nil
}

func (c *Case) validate() error {
	if len(c.Rules) == 0 {
		return errors.New("rules: at least one R-ID is needed")
	}
	for _, r := range c.Rules {
		if !ruleID.MatchString(r) {
			return fmt.Errorf("rules: %q is not an R-ID (R01...)", r)
		}
	}
	if !strings.HasPrefix(c.Name, c.Rules[0]+"-") {
		return fmt.Errorf("the case's name must start with its first rule, %s-", c.Rules[0])
	}
	if len(c.Steps) == 0 {
		return errors.New("steps: at least one step is needed")
	}
	for _, n := range c.Given.Namespaces {
		if n.Name == "" {
			return errors.New("given.namespaces: a namespace needs a name")
		}
	}
	objs := append(append(append(append([]unstructured.Unstructured{}, c.Given.CRDs...), c.Given.Resources...), c.Given.Exceptions...), append(c.Given.Policies, c.Given.InvalidPolicies...)...)
	for _, r := range c.Given.RejectedPolicies {
		objs = append(objs, r.Policy)
	}
	for i, u := range c.Given.UnusablePolicies {
		if !isPolicy(&u.Policy) {
			return fmt.Errorf("given.unusablePolicies[%d]: %s %s has no Ready condition to check: a ClusterPolicy, Policy, ValidatingPolicy, MutatingPolicy or their namespaced kinds is needed", i, u.Policy.GetKind(), u.Policy.GetName())
		}
		objs = append(objs, u.Policy)
	}
	for i, obj := range objs {
		if obj.GetAPIVersion() == "" || obj.GetKind() == "" || obj.GetName() == "" {
			return fmt.Errorf("given: object %d needs apiVersion, kind and metadata.name", i+1)
		}
	}
	for i, s := range c.Steps {
		for j, a := range s.When {
			if n := a.count(); n != 1 {
				return fmt.Errorf("steps[%d].when[%d]: exactly one action is needed, found %d", i, j, n)
			}
			if a.Update != nil && a.Update.Copies != 0 {
				return fmt.Errorf("steps[%d].when[%d].update: copies is for creates only", i, j)
			}
			if a.Create != nil && (a.Create.Copies < 0 || a.Create.Copies > 1000) {
				return fmt.Errorf("steps[%d].when[%d].create: copies must be between 0 and 1000, not %d", i, j, a.Create.Copies)
			}
			if tp := a.Tamper; tp != nil && (tp.For.Kind == "" || tp.For.Name == "" || (tp.Result == "") == !tp.Delete) {
				return fmt.Errorf("steps[%d].when[%d].tamper: for needs kind and name, and either result or delete", i, j)
			}
			if f := a.Forge; f != nil {
				if f.For.Kind == "" || f.For.Name == "" {
					return fmt.Errorf("steps[%d].when[%d].forge: for needs kind and name", i, j)
				}
				switch f.Operation {
				case "", "CREATE", "UPDATE", "DELETE":
				default:
					return fmt.Errorf("steps[%d].when[%d].forge: operation %q is not CREATE, UPDATE or DELETE", i, j, f.Operation)
				}
			}
		}
		for j, r := range s.Then.Reports {
			if r.For.Kind == "" || r.For.Name == "" {
				return fmt.Errorf("steps[%d].then.reports[%d]: for needs kind and name", i, j)
			}
			if r.Absent && len(r.Results) > 0 {
				return fmt.Errorf("steps[%d].then.reports[%d]: absent and results exclude each other", i, j)
			}
			for k, e := range r.Results {
				if e.Policy == "" {
					return fmt.Errorf("steps[%d].then.reports[%d].results[%d]: policy is needed", i, j, k)
				}
			}
		}
		for j, e := range s.Then.Intermediate {
			if e.Kind != "AdmissionReport" && e.Kind != "BackgroundScanReport" {
				return fmt.Errorf("steps[%d].then.intermediate[%d]: kind must be AdmissionReport or BackgroundScanReport", i, j)
			}
		}
	}
	return nil
}

func (a Action) count() int {
	n := 0
	for _, set := range []bool{a.Create != nil, a.Update != nil, a.Apply != nil, a.Delete != nil, a.Exec != nil, a.Scan, a.Restart != "", a.Failover != "", a.Forge != nil, a.Tamper != nil} {
		if set {
			n++
		}
	}
	return n
}
