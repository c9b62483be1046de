package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tally-dev/tally/report"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// CaseLabel marks the namespaces a case creates; a webhook configuration of
// a test environment may select on it.
const CaseLabel = "conformance.tally.dev/case"

const fieldManager = "tally-conformance"

// Runner executes cases against a provider's cluster.
type Runner struct {
	Provider Provider
	// Timeout bounds each wait for an expectation (default 90 s).
	Timeout time.Duration
	// Settle is how long expectations of absence, and unchanged reports,
	// must keep holding once everything expected present is there
	// (default 3 s).
	Settle time.Duration
	// Logf, if set, receives progress lines.
	Logf func(format string, args ...any)
	// ReportAPI is the API final reports are read from
	// (TALLY_CONFORMANCE_REPORT_API; default wgpolicyk8s).
	ReportAPI report.API

	dyn      dynamic.Interface
	kube     kubernetes.Interface
	mapper   meta.RESTMapper
	warnings *warningRecorder
	// cfg is the runner's client configuration (a tenant's impersonates
	// through it).
	cfg *rest.Config
}

// NewRunner connects a runner to the provider's cluster.
func NewRunner(p Provider) (*Runner, error) {
	cfg := rest.CopyConfig(p.Config())
	rec := &warningRecorder{}
	cfg.WarningHandler = rec
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	api, err := ReportAPIFromEnv()
	if err != nil {
		return nil, err
	}
	return &Runner{
		Provider: p, Timeout: 90 * time.Second, Settle: 3 * time.Second, ReportAPI: api,
		dyn: dyn, kube: kube, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc)), warnings: rec, cfg: cfg,
	}, nil
}

// warningRecorder keeps the warnings of the API server's last responses.
type warningRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warningRecorder) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	w.msgs = append(w.msgs, text)
	w.mu.Unlock()
}

func (w *warningRecorder) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.msgs
	w.msgs = nil
	return out
}

func (r *Runner) logf(format string, args ...any) {
	if r.Logf != nil {
		r.Logf(format, args...)
	}
}

// run is the state of one case being executed.
type run struct {
	*Runner
	c       *Case
	uids    map[Ref]types.UID
	created []Ref // cluster-scoped objects and policies to delete at the end
	// tenant writes the objects of the case's tenant namespace (nil: none).
	tenant dynamic.Interface
	// held is when the last step's expectations first held.
	held time.Time
}

// Run executes a case: its given state, then each step's actions and
// expectations. Everything the case created is deleted at the end.
func (r *Runner) Run(ctx context.Context, c *Case) (err error) {
	for _, need := range c.Needs {
		if !r.Provider.Can(need) {
			return &SkipError{Reason: fmt.Sprintf("provider %s cannot %s", r.Provider.Name(), need)}
		}
	}
	if h, ok := r.Provider.(ImageRegistryHost); ok && r.Provider.Can(CanImageRegistry) {
		withHost, err := withRegistry(c, h.ImageRegistry())
		if err != nil {
			return fmt.Errorf("case %s: ${REGISTRY}: %w", c.Name, err)
		}
		c = withHost
	}
	if withIP, err := r.withServiceIP(ctx, c); err != nil {
		return fmt.Errorf("case %s: %w", c.Name, err)
	} else {
		c = withIP
	}
	x := &run{Runner: r, c: c, uids: map[Ref]types.UID{}}
	defer func() {
		cleanupCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		if cerr := x.cleanup(cleanupCtx); cerr != nil && err == nil {
			err = fmt.Errorf("cleanup: %w", cerr)
		}
	}()
	if err := x.given(ctx); err != nil {
		return fmt.Errorf("given: %w", err)
	}
	for i, s := range c.Steps {
		name := s.Name
		if name == "" {
			name = fmt.Sprintf("step %d", i+1)
		}
		r.logf("%s: %s", c.Name, name)
		if err := x.step(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	if c.IntermediatesKept != "" {
		r.logf("%s: intermediate reports may be left: %s", c.Name, c.IntermediatesKept)
		return nil
	}
	return x.checkIntermediatesGone(ctx)
}

// serviceIPPlaceholder is ${KUBERNETES_SERVICE_IP} in a case: the
// ClusterIP of the Service default/kubernetes (the API server, on the
// cluster's Service range).
const serviceIPPlaceholder = "${KUBERNETES_SERVICE_IP}"

// withServiceIP is the case with serviceIPPlaceholder replaced.
func (r *Runner) withServiceIP(ctx context.Context, c *Case) (*Case, error) {
	data, err := json.Marshal(c)
	if err != nil || !bytes.Contains(data, []byte(serviceIPPlaceholder)) {
		return c, err
	}
	svc, err := r.kube.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", serviceIPPlaceholder, err)
	}
	data = bytes.ReplaceAll(data, []byte(serviceIPPlaceholder), []byte(svc.Spec.ClusterIP))
	var out Case
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, err
	}
	out.Name = c.Name
	return &out, nil
}

// SkipError says a case cannot run on this provider.
type SkipError struct{ Reason string }

func (e *SkipError) Error() string { return "skipped: " + e.Reason }

func (x *run) given(ctx context.Context) error {
	for i := range x.c.Given.CRDs {
		crd := x.c.Given.CRDs[i].DeepCopy()
		if err := x.create(ctx, crd, false); err != nil {
			return err
		}
		if err := x.waitEstablished(ctx, RefOf(crd)); err != nil {
			return err
		}
	}
	for _, ns := range x.c.Given.Namespaces {
		// The namespace of an earlier run of the case may still be
		// terminating (cleanup does not wait): it must be gone first.
		if err := x.waitNamespaceGone(ctx, ns.Name); err != nil {
			return err
		}
		obj := &unstructured.Unstructured{}
		obj.SetAPIVersion("v1")
		obj.SetKind("Namespace")
		obj.SetName(ns.Name)
		labels := map[string]string{}
		if !ns.Unlabelled {
			labels[CaseLabel] = x.c.Name
		}
		for k, v := range ns.Labels {
			labels[k] = v
		}
		obj.SetLabels(labels)
		if err := x.create(ctx, obj, false); err != nil {
			return err
		}
	}
	if err := x.setUpTenant(ctx); err != nil {
		return err
	}
	for i := range x.c.Given.Resources {
		if err := x.create(ctx, x.c.Given.Resources[i].DeepCopy(), false); err != nil {
			return err
		}
	}
	for _, b := range x.c.Given.Bulk {
		for i := range b.Count {
			obj := b.Object.DeepCopy()
			obj.SetName(fmt.Sprintf("%s-%03d", b.Object.GetName(), i))
			if err := x.create(ctx, obj, false); err != nil {
				return err
			}
		}
	}
	var policies []*unstructured.Unstructured
	for i := range x.c.Given.Exceptions {
		if err := x.create(ctx, x.c.Given.Exceptions[i].DeepCopy(), false); err != nil {
			return err
		}
	}
	for i := range x.c.Given.Policies {
		p := x.c.Given.Policies[i].DeepCopy()
		if err := x.create(ctx, p, false); err != nil {
			return err
		}
		if isPolicy(p) {
			// A Kubernetes ValidatingAdmissionPolicy (or its binding) has no
			// status an implementation writes: the expectations' polling
			// waits for its results instead.
			policies = append(policies, p)
		} else if err := x.waitCovered(ctx, p); err != nil {
			return err
		}
	}
	for i := range x.c.Given.InvalidPolicies {
		if err := x.create(ctx, x.c.Given.InvalidPolicies[i].DeepCopy(), false); err != nil {
			return err
		}
	}
	for _, r := range x.c.Given.RejectedPolicies {
		if err := x.createRejected(ctx, r); err != nil {
			return err
		}
	}
	var stored []UnusablePolicy
	for _, u := range x.c.Given.UnusablePolicies {
		ok, err := x.createUnusable(ctx, u)
		if err != nil {
			return err
		}
		if ok {
			stored = append(stored, u)
		}
	}
	if err := x.waitLoaded(ctx, policies); err != nil {
		return err
	}
	return x.waitNotReady(ctx, stored)
}

// waitEstablished waits until a CRD serves its kind.
func (x *run) waitEstablished(ctx context.Context, ref Ref) error {
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, x.Timeout, true, func(ctx context.Context) (bool, error) {
		crd, err := x.get(ctx, ref)
		if err != nil {
			return false, nil
		}
		conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("%s not Established: %w", ref, err)
	}
	if rm, ok := x.mapper.(meta.ResettableRESTMapper); ok {
		rm.Reset() // the new kind is to be found
	}
	return nil
}

// waitNamespaceGone waits until a namespace that is being deleted is gone;
// one that does not exist, or is not terminating, is left to create.
func (x *run) waitNamespaceGone(ctx context.Context, name string) error {
	var last *corev1.Namespace
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, x.Timeout, true, func(ctx context.Context) (bool, error) {
		ns, err := x.kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return true, nil
		case err != nil:
			return false, nil // transient: asked again until the timeout
		}
		last = ns
		return ns.DeletionTimestamp == nil, nil
	})
	if err != nil {
		phase := "(unknown)"
		if last != nil {
			phase = string(last.Status.Phase)
		}
		return fmt.Errorf("namespace %s, being deleted (phase %s), is not gone after %s: %w", name, phase, x.Timeout, err)
	}
	return nil
}

// refused reports whether a create failed because an admission webhook (or
// the API server's validation) refused the object.
func refused(err error) bool {
	return apierrors.IsBadRequest(err) || apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || strings.Contains(err.Error(), "denied the request")
}

// firstMissing returns the first of substrings that text lacks ("" if none).
func firstMissing(text string, substrings []string) (string, bool) {
	for _, s := range substrings {
		if !strings.Contains(text, s) {
			return s, true
		}
	}
	return "", false
}

// createRejected creates a policy that the policy webhook must refuse with
// the given reason.
func (x *run) createRejected(ctx context.Context, r RejectedPolicy) error {
	p := r.Policy.DeepCopy()
	ref := RefOf(p)
	err := x.create(ctx, p, false)
	if err == nil {
		return fmt.Errorf("%s was stored; the policy webhook must refuse it", ref)
	}
	if !refused(err) {
		return fmt.Errorf("%s: want a refusal, got %w", ref, err)
	}
	if s, ok := firstMissing(err.Error(), r.MessageContains); ok {
		return fmt.Errorf("%s: the refusal %q does not say %q", ref, err.Error(), s)
	}
	return nil
}

// createUnusable creates a policy that must never be evaluated. Refused at
// creation, with the reason, it is done with; stored (true), it must then
// be marked not Ready (waitNotReady).
func (x *run) createUnusable(ctx context.Context, u UnusablePolicy) (stored bool, err error) {
	p := u.Policy.DeepCopy()
	ref := RefOf(p)
	err = x.create(ctx, p, false)
	if err == nil {
		return true, nil
	}
	if !refused(err) {
		return false, fmt.Errorf("%s: want it refused or stored, got %w", ref, err)
	}
	if s, ok := firstMissing(err.Error(), u.MessageContains); ok {
		return false, fmt.Errorf("%s: the refusal %q does not say %q", ref, err.Error(), s)
	}
	x.logf("%s: %s refused at creation", x.c.Name, ref)
	return false, nil
}

// waitNotReady waits until every stored unusable policy is marked not Ready
// with its reason (and has its Event, if asked).
func (x *run) waitNotReady(ctx context.Context, stored []UnusablePolicy) error {
	for _, u := range stored {
		ref := RefOf(&u.Policy)
		var last error
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, x.Timeout, true, func(ctx context.Context) (bool, error) {
			last = x.checkNotReady(ctx, u)
			return last == nil, nil
		})
		if err != nil {
			if last == nil {
				last = err
			}
			return fmt.Errorf("%s was stored, and is not marked not Ready with its reason within %s: %w", ref, x.Timeout, last)
		}
	}
	return nil
}

// checkNotReady says why a stored unusable policy is not (yet) marked not
// Ready with its reason, nil once it is.
func (x *run) checkNotReady(ctx context.Context, u UnusablePolicy) error {
	ref := RefOf(&u.Policy)
	cur, err := x.get(ctx, ref)
	if err != nil {
		return err
	}
	conds, _, _ := unstructured.NestedSlice(cur.Object, statusPath(cur, "conditions")...)
	status, message := "(none)", ""
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Ready" {
			status, _ = m["status"].(string)
			message, _ = m["message"].(string)
		}
	}
	if status != "False" {
		return fmt.Errorf("condition Ready is %s, want False", status)
	}
	if s, ok := firstMissing(message, u.MessageContains); ok {
		return fmt.Errorf("condition Ready's message %q does not say %q", message, s)
	}
	if u.Event == "" {
		return nil
	}
	for _, s := range append([]string{""}, u.MessageContains...) {
		if err := x.checkEvent(ctx, EventExpectation{For: ref, Reason: u.Event, MessageContains: s}); err != nil {
			return fmt.Errorf("event %s saying %q: %w", u.Event, s, err)
		}
	}
	return nil
}

// waitLoaded waits until the implementation evaluates these policy versions.
func (x *run) waitLoaded(ctx context.Context, policies []*unstructured.Unstructured) error {
	for _, p := range policies {
		ref := RefOf(p)
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, x.Timeout, true, func(ctx context.Context) (bool, error) {
			cur, err := x.get(ctx, ref)
			if err != nil {
				return false, nil
			}
			return x.Provider.PolicyLoaded(ctx, cur)
		})
		if err != nil {
			return fmt.Errorf("%s was not loaded by the implementation within %s (no Ready status)", ref, x.Timeout)
		}
	}
	return nil
}

// waitCovered waits, with a provider beside an admission controller that
// says so (AdmissionCoverer), until that controller sends the requests of
// a policy tally does not load itself.
func (x *run) waitCovered(ctx context.Context, p *unstructured.Unstructured) error {
	c, ok := x.Provider.(AdmissionCoverer)
	if !ok {
		return nil
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, x.Timeout, true, func(ctx context.Context) (bool, error) {
		return c.AdmissionCovered(ctx, p), nil // the policy's spec, as created, says what to cover
	}); err != nil {
		return fmt.Errorf("%s: the admission controller beside does not send its requests within %s", RefOf(p), x.Timeout)
	}
	return nil
}

func isPolicy(u *unstructured.Unstructured) bool {
	switch {
	case strings.HasPrefix(u.GetAPIVersion(), "kyverno.io/"):
		return u.GetKind() == "ClusterPolicy" || u.GetKind() == "Policy"
	case strings.HasPrefix(u.GetAPIVersion(), "policies.kyverno.io/"):
		switch u.GetKind() {
		case "ValidatingPolicy", "NamespacedValidatingPolicy", "MutatingPolicy", "NamespacedMutatingPolicy":
			return true
		}
	}
	return false
}

func (x *run) resource(ref Ref) (dynamic.ResourceInterface, bool, error) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", ref, err)
	}
	m, err := x.mapper.RESTMapping(gv.WithKind(ref.Kind).GroupKind(), gv.Version)
	if err != nil {
		if meta.IsNoMatchError(err) {
			if rm, ok := x.mapper.(meta.ResettableRESTMapper); ok {
				rm.Reset()
			}
			m, err = x.mapper.RESTMapping(gv.WithKind(ref.Kind).GroupKind(), gv.Version)
		}
		if err != nil {
			return nil, false, fmt.Errorf("%s: %w", ref, err)
		}
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		ns := ref.Namespace
		if ns == "" {
			ns = "default"
		}
		return x.clientOf(ns).Resource(m.Resource).Namespace(ns), true, nil
	}
	return x.dyn.Resource(m.Resource), false, nil
}

// clientOf is the client that writes the objects of a namespace: the
// tenant's in the tenant's namespace.
func (x *run) clientOf(namespace string) dynamic.Interface {
	if x.tenant != nil && namespace == x.c.Tenant.Namespace {
		return x.tenant
	}
	return x.dyn
}

// setUpTenant binds the tenant user to Kubernetes' admin role in its
// namespace, and waits until the roles aggregated into admin let it create
// Policies there.
func (x *run) setUpTenant(ctx context.Context) error {
	t := x.c.Tenant
	if t == nil {
		return nil
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: TenantUser, Namespace: t.Namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: TenantUser}},
	}
	if _, err := x.kube.RbacV1().RoleBindings(t.Namespace).Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("tenant: bind %s to admin in %s: %w", TenantUser, t.Namespace, err)
	}
	cfg := rest.CopyConfig(x.cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: TenantUser}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		r, err := kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: t.Namespace, Verb: "create", Group: "kyverno.io", Resource: "policies"},
		}}, metav1.CreateOptions{})
		return err == nil && r.Status.Allowed, nil
	})
	if err != nil {
		return fmt.Errorf("tenant: %s may not create kyverno.io Policies in %s: the roles aggregated into admin are missing", TenantUser, t.Namespace)
	}
	x.tenant = dyn
	return nil
}

// tamper changes a resource's final report behind the implementation's
// back (Tamper).
func (x *run) tamper(ctx context.Context, tp *Tamper) error {
	rep, err := x.finalReport(ctx, tp.For)
	if err != nil {
		return err
	}
	if rep == nil {
		return fmt.Errorf("tamper: %s has no report", tp.For)
	}
	ns := rep.GetNamespace() // "" for a ClusterPolicyReport: Namespace("") is cluster-wide
	ri := x.clientOf(ns).Resource(x.reportAPI().FinalGVR(ns)).Namespace(ns)
	if tp.Delete {
		return ri.Delete(ctx, rep.GetName(), metav1.DeleteOptions{})
	}
	results, _, _ := unstructured.NestedSlice(rep.Object, "results")
	future := time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	for _, r := range results {
		if m, ok := r.(map[string]any); ok {
			m["result"] = tp.Result
			m["timestamp"] = map[string]any{"seconds": future, "nanos": int64(0)}
		}
	}
	_ = unstructured.SetNestedSlice(rep.Object, results, "results") // a slice of JSON values always sets
	manager := tp.FieldManager
	if manager == "" {
		manager = "conf-tamper"
	}
	_, err = ri.Update(ctx, rep, metav1.UpdateOptions{FieldManager: manager})
	return err
}

func (x *run) get(ctx context.Context, ref Ref) (*unstructured.Unstructured, error) {
	ri, _, err := x.resource(ref)
	if err != nil {
		return nil, err
	}
	return ri.Get(ctx, ref.Name, metav1.GetOptions{})
}

func (x *run) remember(u *unstructured.Unstructured, namespaced bool) {
	ref := RefOf(u)
	if !namespaced {
		ref.Namespace = ""
	}
	x.uids[ref] = u.GetUID()
	if !namespaced || isPolicy(u) || u.GetKind() == "PolicyException" {
		if !slices.Contains(x.created, ref) {
			x.created = append(x.created, ref)
		}
	}
}

func (x *run) create(ctx context.Context, obj *unstructured.Unstructured, dryRun bool) error {
	ri, namespaced, err := x.resource(RefOf(obj))
	if err != nil {
		return err
	}
	if namespaced && obj.GetNamespace() == "" {
		obj.SetNamespace("default")
	}
	opts := metav1.CreateOptions{FieldManager: fieldManager}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	out, err := ri.Create(ctx, obj, opts)
	if err != nil {
		return fmt.Errorf("create %s: %w", RefOf(obj), err)
	}
	if !dryRun {
		x.remember(out, namespaced)
		obj.Object = out.Object
	}
	return nil
}

func (x *run) step(ctx context.Context, s Step) error {
	before := map[Ref]string{}
	for _, ref := range s.Then.Unchanged {
		rep, err := x.finalReport(ctx, ref)
		if err != nil {
			return err
		}
		if rep == nil {
			return fmt.Errorf("unchanged: %s has no report before the step", ref)
		}
		before[ref] = rep.GetResourceVersion()
	}
	for i, a := range s.When {
		if err := x.act(ctx, a); err != nil {
			return fmt.Errorf("when[%d]: %w", i, err)
		}
	}
	if s.Within == "" {
		return x.expect(ctx, s.Then, before)
	}
	within, err := time.ParseDuration(s.Within)
	if err != nil {
		return fmt.Errorf("within %q: %w", s.Within, err)
	}
	bounded := *x
	r := *x.Runner
	r.Timeout = within
	bounded.Runner = &r
	start := time.Now()
	if err := bounded.expect(ctx, s.Then, before); err != nil {
		return err
	}
	x.logf("%s: held %s after the step's actions (within %s)", x.c.Name, bounded.held.Sub(start).Round(10*time.Millisecond), within)
	return nil
}

func (x *run) act(ctx context.Context, a Action) error {
	switch {
	case a.Create != nil && a.Create.Copies > 1:
		for i := range a.Create.Copies {
			c := *a.Create
			c.Object = *a.Create.Object.DeepCopy()
			c.Object.SetName(fmt.Sprintf("%s-%03d", a.Create.Object.GetName(), i))
			if err := x.request(ctx, &c, false); err != nil {
				return err
			}
		}
		return nil
	case a.Create != nil:
		return x.request(ctx, a.Create, false)
	case a.Update != nil:
		return x.request(ctx, a.Update, true)
	case a.Apply != nil:
		return x.apply(ctx, a.Apply.DeepCopy())
	case a.Delete != nil:
		return x.delete(ctx, *a.Delete)
	case a.Exec != nil:
		return x.exec(ctx, *a.Exec)
	case a.Scan:
		if !x.Provider.Can(CanRescan) {
			return nil // expectations wait for the implementation's own schedule
		}
		return x.Provider.Rescan(ctx)
	case a.Restart != "":
		return x.Provider.Restart(ctx, a.Restart)
	case a.Failover != "":
		return x.Provider.Failover(ctx, a.Failover)
	case a.Forge != nil:
		return x.forge(ctx, a.Forge)
	case a.Tamper != nil:
		return x.tamper(ctx, a.Tamper)
	}
	return errors.New("empty action")
}

// forge sends the webhook the reviews of a forgery (see Forgery). Where the
// webhook authenticates its callers, each must be refused; elsewhere, each
// must be answered.
func (x *run) forge(ctx context.Context, f *Forgery) error {
	forger, ok := x.Provider.(ReviewForger)
	if !ok {
		return fmt.Errorf("forge: %w", ErrUnsupported)
	}
	real, err := x.get(ctx, f.For)
	if err != nil {
		return fmt.Errorf("forge: the object to impersonate: %w", err)
	}
	gvk := real.GroupVersionKind()
	m, err := x.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return err
	}
	count := max(f.Count, 1)
	var reviews [][]byte
	for i := range count + f.MadeUp {
		obj := real.DeepCopy()
		if f.Object != nil {
			obj = f.Object.DeepCopy()
			obj.SetUID(real.GetUID())
			obj.SetResourceVersion(real.GetResourceVersion())
			if count > 1 {
				setLabel(obj, "tally.dev/forgery", fmt.Sprint(i))
			}
		}
		old := real
		if f.OldObject != nil {
			old = f.OldObject.DeepCopy()
			old.SetUID(real.GetUID())
		}
		if i >= count { // an object that does not exist
			obj.SetName(fmt.Sprintf("ghost-%d", i-count))
			obj.SetUID(types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i)))
			old = nil
		}
		body, err := forgedReview(f, obj, old, m.Resource, i)
		if err != nil {
			return err
		}
		reviews = append(reviews, body)
	}
	authenticated := x.Provider.Can(CanWebhookClientAuth)
	for i, body := range reviews {
		err := forger.ForgeReview(ctx, body)
		switch {
		case authenticated && errors.Is(err, ErrForgeryRefused):
		case authenticated && err == nil:
			return fmt.Errorf("forge: review %d of %d was answered though the webhook authenticates its callers", i+1, len(reviews))
		case err != nil:
			return fmt.Errorf("forge: review %d of %d: %w", i+1, len(reviews), err)
		}
	}
	if authenticated {
		x.logf("forge: all %d forged reviews refused at the TLS handshake", len(reviews))
		return nil
	}
	if f.DeleteReports {
		return x.deleteAdmissionReports(ctx, real.GetNamespace(), string(real.GetUID()))
	}
	return nil
}

// deleteAdmissionReports deletes, for five seconds, every admission report
// of the resource uid in namespace as soon as it appears.
func (x *run) deleteAdmissionReports(ctx context.Context, namespace, uid string) error {
	deleted := 0
	selector := metav1.ListOptions{LabelSelector: labelResourceUID + "=" + uid}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for _, gvr := range []schema.GroupVersionResource{gvrEphemeralReports, {Group: "kyverno.io", Version: "v2", Resource: "admissionreports"}} {
			list, err := x.dyn.Resource(gvr).Namespace(namespace).List(ctx, selector)
			if err != nil {
				continue // not served
			}
			for _, u := range list.Items {
				err := x.dyn.Resource(gvr).Namespace(namespace).Delete(ctx, u.GetName(), metav1.DeleteOptions{})
				switch {
				case err == nil:
					deleted++
				case !apierrors.IsNotFound(err): // merged and deleted meanwhile
					return fmt.Errorf("forge: delete %s %s/%s: %w", gvr.Resource, namespace, u.GetName(), err)
				}
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	x.logf("forge: %d admission reports of %s deleted behind the merger", deleted, uid)
	return nil
}

// forgedReview renders one forged AdmissionReview.
func forgedReview(f *Forgery, obj, old *unstructured.Unstructured, gvr schema.GroupVersionResource, i int) ([]byte, error) {
	op := f.Operation
	if op == "" {
		op = "UPDATE"
	}
	gvk := obj.GroupVersionKind()
	user := map[string]any{"username": "system:serviceaccount:conf:forger"}
	if f.Username != "" {
		user["username"] = f.Username
	}
	if len(f.Groups) > 0 {
		user["groups"] = f.Groups
	}
	req := map[string]any{
		"uid":       fmt.Sprintf("forged-%d-%s", i, obj.GetUID()),
		"kind":      map[string]any{"group": gvk.Group, "version": gvk.Version, "kind": gvk.Kind},
		"resource":  map[string]any{"group": gvr.Group, "version": gvr.Version, "resource": gvr.Resource},
		"name":      obj.GetName(),
		"namespace": obj.GetNamespace(),
		"operation": op,
		"userInfo":  user,
		"dryRun":    f.DryRun,
	}
	if op != "DELETE" {
		req["object"] = obj.Object
	}
	if op != "CREATE" && old != nil {
		req["oldObject"] = old.Object
	}
	return json.Marshal(map[string]any{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req})
}

func setLabel(obj *unstructured.Unstructured, key, value string) {
	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[key] = value
	obj.SetLabels(labels)
}

// request sends a CREATE or UPDATE through admission and checks the answer.
func (x *run) request(ctx context.Context, req *Request, update bool) error {
	obj := req.Object.DeepCopy()
	ref := RefOf(obj)
	x.warnings.take()
	var err error
	if update {
		err = x.update(ctx, obj, req.DryRun)
	} else {
		err = x.create(ctx, obj, req.DryRun)
	}
	warnings := x.warnings.take()
	if req.Denied {
		if err == nil {
			return fmt.Errorf("%s was admitted; it must be denied", ref)
		}
		if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) && !strings.Contains(err.Error(), "denied the request") {
			return fmt.Errorf("%s: want a denial, got %w", ref, err)
		}
		for _, s := range req.MessageContains {
			if !strings.Contains(err.Error(), s) {
				return fmt.Errorf("%s: the denial %q does not contain %q", ref, err.Error(), s)
			}
		}
		return nil
	}
	if err != nil {
		return err
	}
	if req.NoWarnings && len(warnings) > 0 {
		return fmt.Errorf("%s: admitted with warnings %q, want none", ref, warnings)
	}
	joined := strings.Join(warnings, "\n")
	for _, s := range req.MessageContains {
		if !strings.Contains(joined, s) {
			return fmt.Errorf("%s: the warnings %q do not contain %q", ref, warnings, s)
		}
	}
	return nil
}

// update replaces the labels, annotations and top-level fields of an object
// with the given ones, retrying on conflicts.
func (x *run) update(ctx context.Context, obj *unstructured.Unstructured, dryRun bool) error {
	ri, namespaced, err := x.resource(RefOf(obj))
	if err != nil {
		return err
	}
	opts := metav1.UpdateOptions{FieldManager: fieldManager}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	for attempt := 0; ; attempt++ {
		cur, err := ri.Get(ctx, obj.GetName(), metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("update %s: %w", RefOf(obj), err)
		}
		if _, ok, _ := unstructured.NestedMap(obj.Object, "metadata", "labels"); ok {
			cur.SetLabels(obj.GetLabels())
		}
		if _, ok, _ := unstructured.NestedMap(obj.Object, "metadata", "annotations"); ok {
			cur.SetAnnotations(obj.GetAnnotations())
		}
		for k, v := range obj.Object {
			switch k {
			case "apiVersion", "kind", "metadata", "status":
			default:
				cur.Object[k] = runtime.DeepCopyJSONValue(v)
			}
		}
		out, err := ri.Update(ctx, cur, opts)
		if apierrors.IsConflict(err) && attempt < 5 {
			continue
		}
		if err != nil {
			return fmt.Errorf("update %s: %w", RefOf(obj), err)
		}
		if !dryRun {
			x.remember(out, namespaced)
		}
		return nil
	}
}

// apply creates or updates an object by server-side apply; for policies it
// waits until the implementation has loaded the new version.
func (x *run) apply(ctx context.Context, obj *unstructured.Unstructured) error {
	ri, namespaced, err := x.resource(RefOf(obj))
	if err != nil {
		return err
	}
	out, err := ri.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
	if err != nil {
		return fmt.Errorf("apply %s: %w", RefOf(obj), err)
	}
	x.remember(out, namespaced)
	if isPolicy(out) {
		return x.waitLoaded(ctx, []*unstructured.Unstructured{out})
	}
	return nil
}

// delete deletes an object (foreground for namespaces) and waits until it is
// gone.
func (x *run) delete(ctx context.Context, ref Ref) error {
	ri, _, err := x.resource(ref)
	if err != nil {
		return err
	}
	if err := ri.Delete(ctx, ref.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete %s: %w", ref, err)
	}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, x.Timeout, true, func(ctx context.Context) (bool, error) {
		_, err := ri.Get(ctx, ref.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// exec posts a pods/exec request. Without a kubelet it cannot succeed; what
// matters is that admission sees it and nothing gets reported.
func (x *run) exec(ctx context.Context, ref Ref) error {
	err := x.kube.CoreV1().RESTClient().Post().Namespace(ref.Namespace).Resource("pods").Name(ref.Name).
		SubResource("exec").Param("command", "true").Param("stdout", "true").Do(ctx).Error()
	if err != nil && strings.Contains(err.Error(), "denied the request") {
		return fmt.Errorf("exec %s was denied by a webhook: %w", ref, err)
	}
	return nil // without a kubelet the request fails after admission; that is expected
}

// cleanup deletes what the case created: policies and exceptions first (so
// no later deletion is evaluated), then cluster-scoped objects and the
// namespaces.
// checkIntermediatesGone: no intermediate report of the case's resources
// outlives its merge (R20): no AdmissionReport, BackgroundScanReport or
// (beside Kyverno) EphemeralReport is left in the API server, within 30s of
// the case's last step, before the case's namespaces go (whose deletion
// would remove them anyway). A kind the cluster does not serve has none.
func (x *run) checkIntermediatesGone(ctx context.Context) error {
	uids := map[string]bool{}
	for _, uid := range x.uids {
		uids[string(uid)] = true
	}
	var left []string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		left = nil
		for _, gvr := range intermediateKinds {
			if strings.HasPrefix(gvr.Resource, "cluster") {
				list, err := x.dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
				if err != nil {
					continue // not served
				}
				for _, u := range list.Items {
					if uids[u.GetLabels()[labelResourceUID]] {
						left = append(left, gvr.Resource+" "+u.GetName())
					}
				}
				continue
			}
			for _, ns := range x.c.Given.Namespaces {
				list, err := x.dyn.Resource(gvr).Namespace(ns.Name).List(ctx, metav1.ListOptions{})
				if err != nil {
					continue // not served
				}
				for _, u := range list.Items {
					left = append(left, gvr.Resource+" "+ns.Name+"/"+u.GetName())
				}
			}
		}
		return len(left) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("intermediate reports left 30s after the last step (R20: none outlives its merge): %v", left)
	}
	return nil
}

func (x *run) cleanup(ctx context.Context) error {
	var errs []error
	ordered := slices.Clone(x.created)
	slices.SortStableFunc(ordered, func(a, b Ref) int {
		rank := func(r Ref) int {
			switch {
			case strings.HasPrefix(r.APIVersion, "kyverno.io/"):
				return 0
			case r.Kind == "Namespace":
				return 2
			}
			return 1
		}
		return rank(a) - rank(b)
	})
	for _, ns := range x.c.Given.Namespaces {
		ref := Ref{APIVersion: "v1", Kind: "Namespace", Name: ns.Name}
		if !slices.Contains(ordered, ref) {
			ordered = append(ordered, ref)
		}
	}
	for _, ref := range ordered {
		ri, _, err := x.resource(ref)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := ri.Delete(ctx, ref.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete %s: %w", ref, err))
		}
	}
	return errors.Join(errs...)
}

// uidOf returns the UID of an object the case created or that exists now.
func (x *run) uidOf(ctx context.Context, ref Ref) (types.UID, bool, error) {
	key := ref
	if uid, ok := x.uids[key]; ok {
		return uid, ref.Namespace != "" || ref.Kind != "Namespace", nil
	}
	ri, namespaced, err := x.resource(ref)
	if err != nil {
		return "", false, err
	}
	u, err := ri.Get(ctx, ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", namespaced, nil
	}
	if err != nil {
		return "", namespaced, err
	}
	return u.GetUID(), namespaced, nil
}

// reportAPI is the API final reports are read from.
func (x *run) reportAPI() report.API {
	if x.ReportAPI == "" {
		return report.APIWGPolicy
	}
	return x.ReportAPI
}

// finalReport returns the PolicyReport or ClusterPolicyReport of a
// resource, nil if there is none.
func (x *run) finalReport(ctx context.Context, ref Ref) (*unstructured.Unstructured, error) {
	uid, namespaced, err := x.uidOf(ctx, ref)
	if err != nil || uid == "" {
		return nil, err
	}
	var ri dynamic.ResourceInterface
	if namespaced && ref.Namespace != "" {
		ri = x.dyn.Resource(x.reportAPI().FinalGVR(ref.Namespace)).Namespace(ref.Namespace)
	} else {
		ri = x.dyn.Resource(x.reportAPI().FinalGVR(""))
	}
	u, err := ri.Get(ctx, string(uid), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return u, err
}
