package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"
	"sync"

	"github.com/go-logr/logr"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/controllers/policyevents"
	"github.com/tally-dev/tally/controllers/watch"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/report"
)

// badRequest is an error answered with HTTP 400.
type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

func badRequestf(format string, args ...any) error {
	return &badRequest{msg: fmt.Sprintf(format, args...)}
}

// ServeHTTP answers one AdmissionReview on /validate.
func (b *Bridge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := b.clock.Now()
	if r.Method != http.MethodPost {
		http.Error(w, "admission reviews are POSTed", http.StatusMethodNotAllowed)
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			http.Error(w, fmt.Sprintf("content type %q is not supported: send application/json", ct), http.StatusUnsupportedMediaType)
			return
		}
	}
	// Bounded before any work: no more reviews are read and decoded at
	// once than the pool can evaluate. The rest are answered at once,
	// unread (429): the API server applies the webhook's failurePolicy, as
	// for any webhook that cannot answer.
	select {
	case b.decoding <- struct{}{}:
		defer func() { <-b.decoding }()
	default:
		b.metrics.evalRefused.Inc()
		http.Error(w, "every evaluation slot of the webhook is busy: the request is not read (the webhook's failurePolicy applies)", http.StatusTooManyRequests)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, b.opts.MaxRequestBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			http.Error(w, fmt.Sprintf("admission review larger than the limit of %d bytes", tooLarge.Limit), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "read admission review: "+err.Error(), http.StatusBadRequest)
		return
	}
	review, err := decodeReview(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), b.opts.Timeout)
	defer cancel()
	resp, err := b.Review(ctx, review.Request)
	if err != nil {
		status := http.StatusInternalServerError
		var bad *badRequest
		if errors.As(err, &bad) {
			status = http.StatusBadRequest
		}
		http.Error(w, err.Error(), status)
		return
	}
	out, err := json.Marshal(&admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"},
		Response: resp,
	})
	if err != nil {
		http.Error(w, "encode admission response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out) // the caller went away: there is no one left to tell
	op := string(review.Request.Operation)
	b.metrics.requests.WithLabelValues(op, fmt.Sprint(resp.Allowed)).Inc()
	b.metrics.latency.WithLabelValues(op).Observe(b.clock.Since(start).Seconds())
}

// decodeReview reads an admission.k8s.io/v1 AdmissionReview and checks what
// answering it needs.
func decodeReview(body []byte) (*admissionv1.AdmissionReview, error) {
	if len(body) == 0 {
		return nil, badRequestf("empty body: expected an admission.k8s.io/v1 AdmissionReview")
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil {
		return nil, badRequestf("malformed AdmissionReview: %v", err)
	}
	if review.APIVersion != admissionv1.SchemeGroupVersion.String() || review.Kind != "AdmissionReview" {
		return nil, badRequestf("expected apiVersion admission.k8s.io/v1 and kind AdmissionReview, got apiVersion %q kind %q", review.APIVersion, review.Kind)
	}
	req := review.Request
	switch {
	case req == nil:
		return nil, badRequestf("AdmissionReview has no request")
	case req.UID == "":
		return nil, badRequestf("AdmissionReview request has no uid")
	case req.Operation == "":
		return nil, badRequestf("AdmissionReview request has no operation")
	case req.Kind.Kind == "":
		return nil, badRequestf("AdmissionReview request has no kind")
	}
	return &review, nil
}

// skipped reports whether a request is admitted without evaluation and
// records nothing (R13): DELETE (and CONNECT) requests, Events, pods/exec.
func skipped(req *admissionv1.AdmissionRequest) bool {
	switch req.Operation {
	case admissionv1.Create, admissionv1.Update:
	default:
		return true
	}
	if req.Kind.Kind == "Event" && (req.Kind.Group == "" || req.Kind.Group == "events.k8s.io") {
		return true
	}
	return req.SubResource == "exec"
}

func decodeObject(what string, raw []byte) (map[string]any, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, badRequestf("request.%s is not a JSON object: %v", what, err)
	}
	return obj, nil
}

func userInfoOf(u authenticationv1.UserInfo) *engine.UserInfo {
	out := &engine.UserInfo{Username: u.Username, UID: u.UID, Groups: u.Groups}
	if len(u.Extra) > 0 {
		out.Extra = make(map[string][]string, len(u.Extra))
		for k, v := range u.Extra {
			out.Extra[k] = []string(v)
		}
	}
	return out
}

// evaluation is what the evaluating goroutine hands over: the results of
// the policies it finished, in snapshot order.
type evaluation struct {
	mu      sync.Mutex
	results [][]engine.RuleResult
	done    int
	// panicked[i]: the evaluation of policy i panicked (results[i] is nil);
	// the policies after it were evaluated.
	panicked []bool
	anyPanic bool
}

// evaluatePolicy is the engine's evaluation; tests replace it.
var evaluatePolicy = (*engine.Policy).Evaluate

// evaluateSafely evaluates one policy, turning a panic into an error that
// carries the panic's type and stack, never its value (which may hold the
// object's content).
func evaluateSafely(ctx context.Context, p *engine.Policy, req *engine.Request) (rr []engine.RuleResult, err error) {
	defer func() {
		if v := recover(); v != nil { // the engine must never take the webhook down
			rr, err = nil, fmt.Errorf("panic (%T) at\n%s", v, debug.Stack())
		}
	}()
	return evaluatePolicy(p, ctx, req), nil
}

// Review evaluates one admission request and builds its answer. Results are
// recorded unless the request is denied, a dry run, or not a CREATE/UPDATE
// of a whole object.
func (b *Bridge) Review(ctx context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	if skipped(req) {
		return resp, nil
	}
	if isPolicyWrite(req) {
		if err := checkPolicy(req.Object.Raw, req.Kind.Kind == "Policy"); err != nil {
			return policyRefused(req, err), nil
		}
	}
	obj, err := decodeObject("object", req.Object.Raw)
	if err != nil {
		return nil, err
	}
	if obj == nil {
		return nil, badRequestf("%s request has no object", req.Operation)
	}
	old, err := decodeObject("oldObject", req.OldObject.Raw)
	if err != nil {
		return nil, err
	}
	subject := report.SubjectOf(obj)
	namespace := subject.Namespace
	if namespace == "" && !(req.Kind.Group == "" && req.Kind.Kind == "Namespace") {
		namespace = req.Namespace
	}
	nsLabels := b.policies.namespaceLabels(namespace)
	snap := b.policies.current()
	ereq := &engine.Request{
		Object: obj, OldObject: old, Operation: string(req.Operation), Subresource: req.SubResource,
		UserInfo: userInfoOf(req.UserInfo), NamespaceLabels: nsLabels, Exceptions: snap.exceptions,
		Loader:   b.opts.Loader,
		Data:     b.opts.Data,
		Images:   b.opts.Images,
		Resource: schema.GroupVersionResource{Group: req.Resource.Group, Version: req.Resource.Version, Resource: req.Resource.Resource},
	}

	ev := &evaluation{results: make([][]engine.RuleResult, len(snap.policies)), panicked: make([]bool, len(snap.policies))}
	finished := make(chan struct{})
	accepted := b.pool.run(func() {
		defer close(finished)
		for i, ap := range snap.policies {
			if ctx.Err() != nil {
				return
			}
			if !b.webhookMatches(ctx, ap, ereq) {
				ev.mu.Lock()
				ev.done = i + 1 // not sent to the policy: no result
				ev.mu.Unlock()
				continue
			}
			rr, err := evaluateSafely(ctx, ap.compiled, ereq)
			if err != nil {
				b.metrics.evalPanics.Inc()
				logr.FromContextOrDiscard(ctx).Error(err, "evaluation panicked; the policy is answered per its failurePolicy", "policy", ap.compiled.Name)
			}
			ev.mu.Lock()
			ev.results[i], ev.done = rr, i+1
			ev.panicked[i] = err != nil
			ev.anyPanic = ev.anyPanic || err != nil
			ev.mu.Unlock()
		}
	})
	timedOut, cause := false, fmt.Sprintf("evaluation did not finish within %s", b.opts.Timeout)
	if accepted {
		select {
		case <-finished:
		case <-ctx.Done():
			timedOut = true
		}
	} else {
		// Every worker and overflow goroutine is busy (pool.go): answered
		// now, as a timeout would be.
		b.metrics.evalRefused.Inc()
		timedOut, cause = true, "evaluation refused: every evaluation slot of the webhook is busy"
	}
	ev.mu.Lock()
	done, anyPanic := ev.done, ev.anyPanic
	results, panicked := ev.results[:done], ev.panicked[:done]
	ev.mu.Unlock()
	if !timedOut && done < len(snap.policies) {
		timedOut = true // the goroutine saw the deadline first
	}

	now := b.clock.Now()
	var denials []string
	var record []wgv1alpha2.PolicyReportResult
	// recomputed[i]: record[i] is of a policy with background on, which
	// the scan evaluates again (coverage.go).
	var recomputed []bool
	labels := map[string]string{}
	for i, rrs := range results {
		ap := snap.policies[i]
		if panicked[i] {
			// Not evaluated: answered as a policy whose evaluation did not
			// finish, naming it and nothing of the object.
			const why = "evaluation panicked"
			if ap.failClosed && ap.compiled.CanEnforce(namespace, nsLabels) {
				denials = append(denials, fmt.Sprintf("%s:\n  %s (failurePolicy Fail)", ap.compiled.Name, why))
			} else {
				resp.Warnings = append(resp.Warnings, fmt.Sprintf("policy %s: not evaluated: %s (failurePolicy Ignore or Audit)", ap.compiled.Name, why))
			}
			continue
		}
		var policyDenials []string
		for _, rr := range rrs {
			switch rr.Result {
			case engine.Fail, engine.Warn:
				if ap.denies(rr, namespace, nsLabels) {
					policyDenials = append(policyDenials, fmt.Sprintf("  %s: %s", ruleOrPolicy(rr), rr.Message))
				} else if ap.emitWarning {
					resp.Warnings = append(resp.Warnings, fmt.Sprintf("policy %s: %s", qualifiedRule(rr), rr.Message))
				}
			case engine.Error:
				if ap.denies(rr, namespace, nsLabels) {
					policyDenials = append(policyDenials, fmt.Sprintf("  %s: evaluation error (failurePolicy Fail): %s", ruleOrPolicy(rr), rr.Message))
				} else if ap.emitWarning {
					resp.Warnings = append(resp.Warnings, fmt.Sprintf("policy %s: evaluation error: %s", qualifiedRule(rr), rr.Message))
				}
			}
			record = append(record, report.Result(ap.compiled, rr, report.ProcessAdmission, now))
			recomputed = append(recomputed, ap.compiled.BackgroundEnabled())
		}
		if len(rrs) > 0 && ap.labelKey != "" {
			labels[ap.labelKey] = ap.resourceVersion
		}
		if len(policyDenials) > 0 {
			denials = append(denials, ap.compiled.Name+":\n"+strings.Join(policyDenials, "\n"))
		}
	}
	if timedOut {
		for _, ap := range snap.policies[done:] {
			if ap.failClosed && ap.compiled.CanEnforce(namespace, nsLabels) {
				denials = append(denials, fmt.Sprintf("%s:\n  %s (failurePolicy Fail)", ap.compiled.Name, cause))
			} else {
				resp.Warnings = append(resp.Warnings, fmt.Sprintf("policy %s: not evaluated: %s (failurePolicy Ignore or Audit)", ap.compiled.Name, cause))
			}
		}
	}
	if !(req.DryRun != nil && *req.DryRun) && req.SubResource == "" {
		b.emitEvents(req, subject, snap.policies[:len(results)], results, panicked, len(denials) > 0, namespace, nsLabels)
	}
	if len(denials) > 0 {
		resp.Allowed = false
		resp.Warnings = nil
		resp.Result = &metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden,
			Message: fmt.Sprintf("resource %s was blocked due to the following policies\n\n%s", describe(req, subject), strings.Join(denials, "\n")),
		}
		return resp, nil // R11: a denied request records nothing
	}
	if timedOut || anyPanic || len(record) == 0 || req.SubResource != "" || (req.DryRun != nil && *req.DryRun) || subject.UID == "" {
		return resp, nil // R13: dry runs record nothing; partial evaluations neither
	}
	hash, err := report.AdmissionHash(obj)
	if err != nil {
		return resp, nil // not a JSON document after all: nothing to label the report with
	}
	gvr := schema.GroupVersionResource{Group: req.Resource.Group, Version: req.Resource.Version, Resource: req.Resource.Resource}
	if b.opts.Sink != nil {
		b.opts.Sink(Admitted{Request: req, Subject: subject, GVR: gvr, Hash: report.HashText(hash), PolicyLabels: labels, Results: record})
		return resp, nil
	}
	if b.opts.Scanned != nil && slices.Contains(recomputed, true) && b.servedKind(gvr) && b.opts.Scanned(ctx, gvr) {
		kept := record[:0:0]
		for i, r := range record {
			if !recomputed[i] {
				kept = append(kept, r)
			}
		}
		b.metrics.leftToScan.Add(float64(len(record) - len(kept)))
		if record = kept; len(record) == 0 {
			return resp, nil
		}
	}
	b.recorder.add(&entry{
		uid: string(subject.UID), namespace: subject.Namespace,
		owner: metav1.OwnerReference{APIVersion: subject.APIVersion, Kind: subject.Kind, Name: subject.Name, UID: types.UID(subject.UID)},
		gvr:   gvr,
		hash:  report.HashText(hash), at: now, policyLabels: labels, results: record,
		fresh: req.Operation == admissionv1.Create,
	})
	return resp, nil
}

// emitEvents records Kyverno's result Events of an answered request: when
// it was denied, each enforced violation that denied it (on the policy,
// "blocked"); otherwise each violation (on the policy and the object) and,
// with success events, each policy all of whose results passed.
func (b *Bridge) emitEvents(req *admissionv1.AdmissionRequest, subject report.Subject, policies []*admissionPolicy,
	results [][]engine.RuleResult, panicked []bool, denied bool, namespace string, nsLabels map[string]string) {
	em := b.opts.Events
	if em == nil || em.Recorder == nil {
		return
	}
	name := subject.Name
	if name == "" {
		name = req.Name
	}
	object := &corev1.ObjectReference{APIVersion: schema.GroupVersion{Group: req.Kind.Group, Version: req.Kind.Version}.String(),
		Kind: req.Kind.Kind, Namespace: namespace, Name: name, UID: types.UID(subject.UID)}
	for i, rrs := range results {
		if panicked[i] || len(rrs) == 0 {
			continue
		}
		ap := policies[i]
		violated := false
		for _, rr := range rrs {
			status, violation := policyevents.StatusOf(rr.Result)
			if !violation {
				continue
			}
			violated = true
			if denied && !ap.denies(rr, namespace, nsLabels) {
				continue // not what blocked the request; the object was not admitted
			}
			em.Violation(object, policyevents.Result{Policy: ap.ref, PolicyName: ap.ref.Name, Rule: rr.Rule, Status: status, Message: rr.Message}, denied)
		}
		if !violated && !denied {
			em.Applied(object, ap.ref)
		}
	}
}

// denies reports whether a result denies the request: a violation of a rule
// the policy enforces here, or an error of one under failurePolicy Fail.
func (ap *admissionPolicy) denies(rr engine.RuleResult, namespace string, nsLabels map[string]string) bool {
	switch rr.Result {
	case engine.Fail, engine.Warn:
		return ap.compiled.Enforced(rr.Rule, namespace, nsLabels)
	case engine.Error:
		return ap.failClosed && ap.compiled.Enforced(rr.Rule, namespace, nsLabels)
	}
	return false
}

// webhookMatches evaluates a policy's webhook match conditions
// (spec.webhookConfiguration.matchConditions) on the request, as the API
// server evaluates those of the webhook Kyverno registers for the policy:
// a condition that is false keeps the request from the policy. A condition
// that cannot be evaluated follows the policy's failurePolicy, as it does
// for a webhook: Ignore skips the policy, Fail evaluates it.
func (b *Bridge) webhookMatches(ctx context.Context, ap *admissionPolicy, req *engine.Request) bool {
	if ap.matchConditions == nil {
		return true
	}
	o := ap.matchConditions.Evaluate(ctx, req.CELInput())
	if o.ConditionErr != nil {
		logr.FromContextOrDiscard(ctx).V(1).Info("webhook match conditions could not be evaluated", "policy", ap.compiled.Name, "error", o.ConditionErr.Error())
		return ap.failClosed
	}
	return !o.NotMet
}

// Admitted is what one admitted, recorded request produced.
type Admitted struct {
	Request *admissionv1.AdmissionRequest
	// Subject is the admitted object; GVR its resource type.
	Subject report.Subject
	GVR     schema.GroupVersionResource
	// Hash is tally's content hash of the object.
	Hash string
	// PolicyLabels are the cpol.kyverno.io/pol.kyverno.io labels of the
	// policies that gave results.
	PolicyLabels map[string]string
	Results      []wgv1alpha2.PolicyReportResult
}

func describe(req *admissionv1.AdmissionRequest, s report.Subject) string {
	name := s.Name
	if name == "" {
		name = req.Name
	}
	if s.Namespace != "" {
		return req.Kind.Kind + "/" + s.Namespace + "/" + name
	}
	return req.Kind.Kind + "//" + name
}

// qualifiedRule names a result's rule as warnings name it: "policy.rule",
// or the policy alone for a CEL policy's result without a rule.
func qualifiedRule(rr engine.RuleResult) string {
	if rr.Rule == "" {
		return rr.Policy
	}
	return rr.Policy + "." + rr.Rule
}

// ruleOrPolicy names a result in a denial, under its policy: its rule, or
// "validation" for a CEL policy's result without a rule.
func ruleOrPolicy(rr engine.RuleResult) string {
	if rr.Rule == "" {
		return "validation"
	}
	return rr.Rule
}

// servedKind says whether discovery serves a request's resource (the
// cached discovery: no call for a group version it knows). Only then is
// the scan's coverage of it asked and remembered: a forged review may name
// any resource (issue 39). Without discovery (tests), every resource is.
func (b *Bridge) servedKind(gvr schema.GroupVersionResource) bool {
	if b.disc == nil {
		return true
	}
	out, _ := watch.ServedOnce(b.disc, gvr) // an error: not known to be served
	return len(out) == 1
}
