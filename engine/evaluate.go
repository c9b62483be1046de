package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/engine/cel"
	"github.com/tally-dev/tally/engine/conditions"
	"github.com/tally-dev/tally/engine/match"
	"github.com/tally-dev/tally/engine/pattern"
	"github.com/tally-dev/tally/engine/podsecurity"
	"github.com/tally-dev/tally/engine/variables"
	"github.com/tally-dev/tally/internal/tenant"
)

// Operations of an admission request; a background scan evaluates as CREATE.
const (
	OpCreate = "CREATE"
	OpUpdate = "UPDATE"
	OpDelete = "DELETE"
)

// Request is one evaluation: an existing resource in a background scan, or an
// admission request.
type Request struct {
	// Object is the resource (nil for DELETE); OldObject its previous state (UPDATE, DELETE).
	Object, OldObject map[string]any
	// Operation defaults to CREATE.
	Operation   string
	Subresource string
	// Parent is, for the object of a subresource that has a kind of its own
	// (a Scale for deployments/scale), the group, version and kind of the
	// resource it belongs to (apps/v1 Deployment). Rules then see the request
	// as that subresource of the parent (kinds: [Deployment/scale]) and as
	// the object's own kind (kinds: [Scale]), as Kyverno does. Empty when the
	// subresource object is the parent's kind (deployments/status) or there
	// is no subresource.
	Parent schema.GroupVersionKind
	// UserInfo is nil in background scans.
	UserInfo *UserInfo
	// NamespaceLabels are the labels of the resource's namespace (for namespaceSelector).
	NamespaceLabels map[string]string
	// Namespace is the resource's Namespace object, when the caller has it
	// (CEL's namespaceObject; else one is made of NamespaceLabels).
	Namespace map[string]any
	// Resource is the resource's group, version and resource (plural), when
	// the caller knows it from discovery; offline it is guessed from the kind.
	Resource schema.GroupVersionResource
	// Background is true in background scans: exceptions with background: false do not apply.
	Background bool
	// JSON says that Object is a JSON payload (the CLI's jsonPayloads), not
	// a Kubernetes resource: only policies in JSON evaluation mode
	// evaluate it.
	JSON bool
	// Authz says that Object is an authorization request (the CLI's
	// envoyPayloads or httpPayloads: "Envoy" or "HTTP"): only policies in
	// that evaluation mode evaluate it.
	Authz      string
	Exceptions []*Exception
	// CELExceptions are the policies.kyverno.io PolicyExceptions (for ValidatingPolicies).
	CELExceptions []*CELException
	// Params serves the params of ValidatingAdmissionPolicy bindings.
	Params ParamSource
	// Data serves the cluster reads of CEL policies (Kyverno's resource
	// library); nil offline.
	Data   cel.ClusterData
	Values ValueSource
	Loader ContextLoader
	// Images verifies the images of verifyImages rules; nil skips them
	// (the CLI without --registry).
	Images ImageVerifier
	// Registry, when set, reads image data straight from the registries
	// for an ImageValidatingPolicy's getImageData (Kyverno's CLI reads them
	// so); otherwise getImageData is served by Data, as image.GetMetadata.
	Registry cel.ImageData

	// cache holds what every policy evaluated on this request shares. A
	// Request must not be evaluated by two goroutines at once.
	cache requestCache
}

type requestCache struct {
	filled bool
	data   map[string]any // the request document, without policy values
	res    match.Resource
	pod    *podsecurity.Pod
	podErr error
	cel    *cel.Input
}

// shared fills the cache once per request.
func (req *Request) shared() *requestCache {
	c := &req.cache
	if !c.filled {
		c.data = req.data(req.Object, req.OldObject)
		c.res = resourceOf(req.subject(), req.Subresource)
		if req.Subresource != "" && req.Parent.Kind != "" {
			c.res.ObjectGroup, c.res.ObjectVersion, c.res.ObjectKind = c.res.Group, c.res.Version, c.res.Kind
			c.res.Group, c.res.Version, c.res.Kind = req.Parent.Group, req.Parent.Version, req.Parent.Kind
		}
		c.filled = true
	}
	return c
}

// podOf reads the pod of the subject once per request.
func (req *Request) podOf(kind string, obj map[string]any) (*podsecurity.Pod, error) {
	c := &req.cache
	if c.pod == nil && c.podErr == nil {
		c.pod, c.podErr = podsecurity.PodOf(kind, obj)
	}
	return c.pod, c.podErr
}

func (req *Request) operation() string {
	if req.Operation == "" {
		return OpCreate
	}
	return req.Operation
}

// subject is the object that matching and validation look at: the new
// object, or the old one for a DELETE.
func (req *Request) subject() map[string]any {
	if req.Object != nil {
		return req.Object
	}
	return req.OldObject
}

type evaluation struct {
	ctx    context.Context
	policy *Policy
	req    *Request
	res    match.Resource
	adm    *match.Admission
	base   map[string]any // request data shared by every rule (never modified)
	obj    map[string]any // the subject after values were applied
	// objOverridden is set when values replaced parts of the subject.
	objOverridden bool
}

// Evaluate applies every validate rule of the policy to the request and
// returns one result per rule that matched. A rule that does not match (kind,
// names, selectors, exclude, the Policy's namespace) yields nothing.
func (p *Policy) Evaluate(ctx context.Context, req *Request) []RuleResult {
	e, ok := p.begin(ctx, req)
	if !ok {
		return nil
	}
	if req.payload() != "" && p.vpol == nil {
		return nil // only JSON- (or Envoy-, HTTP-) mode policies evaluate payloads
	}
	if p.vpol != nil {
		if p.deleting {
			return deletionResults(p.vpol.evaluate(e))
		}
		return p.vpol.evaluate(e)
	}
	if p.vap != nil {
		return p.vap.evaluate(e)
	}
	if p.mpol != nil {
		return p.mpol.evaluate(e)
	}
	e.admission()
	var results []RuleResult
	for _, rule := range p.Rules {
		if !e.ruleMatches(rule) {
			continue
		}
		if rule.matcher == nil { // the rule did not compile: report it where its kinds allow
			results = append(results, e.result(rule, Error, rule.Err.Error()))
			continue
		}
		if err := e.ctx.Err(); err != nil {
			// Past the deadline: the rules left are not evaluated, and say so.
			results = append(results, e.result(rule, Error, stoppedMessage(err)))
			continue
		}
		if r, ok := e.rule(rule); ok {
			results = append(results, r)
		}
		if p.Spec.ApplyRules != nil && *p.Spec.ApplyRules == "One" {
			break
		}
	}
	return results
}

// payload is the kind of payload the request's object is: "JSON",
// "Envoy", "HTTP", or "" for a Kubernetes resource.
func (req *Request) payload() string {
	if req.JSON {
		return "JSON"
	}
	return req.Authz
}

// begin starts the evaluation of a policy on a request: nothing (false)
// without an object, or for a namespaced policy on a resource of another
// namespace. A namespaced policy reads the cluster with its namespace's
// identity (R47): whatever it reads, it reads through tenant.Of.
func (p *Policy) begin(ctx context.Context, req *Request) (*evaluation, bool) {
	if req.subject() == nil {
		return nil, false
	}
	ctx = tenant.With(ctx, p.Namespace)
	e := &evaluation{ctx: ctx, policy: p, req: req, res: req.shared().res}
	if p.Namespace != "" && !match.InPolicyNamespace(p.Namespace, e.res) {
		return nil, false
	}
	return e, true
}

// admission sets what classic rules match of the admission request: the
// user and the operation (none for a background CREATE).
func (e *evaluation) admission() {
	req := e.req
	if req.UserInfo != nil {
		e.adm = &match.Admission{
			Operation: req.operation(), Username: req.UserInfo.Username, Groups: req.UserInfo.Groups,
			Roles: req.UserInfo.Roles, ClusterRoles: req.UserInfo.ClusterRoles,
		}
	} else if req.Operation != "" && req.Operation != OpCreate {
		e.adm = &match.Admission{Operation: req.Operation}
	}
}

// ruleMatches says whether a classic rule applies to the request; a rule
// that did not compile applies where its match and exclude, read as
// written, select the resource (its result is then its error).
func (e *evaluation) ruleMatches(rule *Rule) bool {
	if rule.matcher == nil {
		ok, _ := match.Matches(rule.Raw.Match, rule.Raw.Exclude, e.res, e.req.NamespaceLabels, e.adm)
		return ok
	}
	return rule.matcher.Matches(&e.res, e.req.NamespaceLabels, e.adm)
}

// ruleInputs readies a rule's data (the test's values, its context) and
// decides what comes before the rule's own body: a skip when an exception
// applies or the preconditions do not hold, an error when the context
// cannot be loaded (done); else the data the body reads.
func (e *evaluation) ruleInputs(rule *Rule, data map[string]any) (RuleResult, bool) {
	if xs := e.exceptionsFor(rule, data); len(xs) > 0 {
		if rule.podSecurity != nil {
			// Kyverno's podSecurity rules name the first such exception only.
			x := xs[0]
			r := e.result(rule, Skip, "rule is skipped due to policy exception "+x.Name)
			r.Exceptions = []string{x.ObjectName}
			return r, true
		}
		return e.exceptionSkip(rule, xs, ""), true
	}
	if e.req.Values != nil {
		for k, v := range e.req.Values.RuleValues(e.policy.Name, rule.Name) {
			setPath(data, k, v)
		}
	}
	if err := e.loadContext(rule.Raw.Context, data); err != nil {
		return e.result(rule, Error, "failed to load context: "+err.Error()), true
	}
	if rule.preconditions != nil {
		return e.preconditions(rule, rule.preconditions, data)
	}
	return RuleResult{}, false
}

// stoppedMessage is the message of a rule whose evaluation the context
// ended (its deadline, or the caller's cancellation).
func stoppedMessage(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "evaluation stopped: the evaluation deadline was exceeded"
	}
	return "evaluation stopped: " + err.Error()
}

func resourceOf(obj map[string]any, subresource string) match.Resource {
	apiVersion, _ := obj["apiVersion"].(string)
	group, version := "", apiVersion
	if i := strings.Index(apiVersion, "/"); i >= 0 {
		group, version = apiVersion[:i], apiVersion[i+1:]
	}
	kind, _ := obj["kind"].(string)
	md, _ := obj["metadata"].(map[string]any)
	name, _ := md["name"].(string)
	ns, _ := md["namespace"].(string)
	return match.Resource{
		Group: group, Version: version, Kind: kind, Subresource: subresource,
		Name: name, Namespace: ns,
		Labels: stringMap(md["labels"]), Annotations: stringMap(md["annotations"]),
	}
}

func stringMap(v any) map[string]string {
	m, _ := v.(map[string]any)
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, val := range m {
		s, _ := val.(string)
		out[k] = s
	}
	return out
}

func (e *evaluation) result(rule *Rule, r wgv1alpha2.Result, msg string) RuleResult {
	if r == Fail && !e.policy.Scored {
		r = Warn
	}
	return RuleResult{Policy: e.policy.Name, Rule: rule.Name, Result: r, Message: msg, Properties: rule.Raw.ReportProperties}
}

// baseData is built once per request and policy: the request document with
// the policy-level values applied.
func (e *evaluation) baseData() map[string]any {
	if e.base != nil {
		return e.base
	}
	data := e.req.shared().data
	e.obj = e.req.subject()
	if e.req.Values != nil {
		if values := e.req.Values.PolicyValues(e.policy.Name); len(values) > 0 {
			data = cloneTop(data)
			for k, v := range values {
				setPath(data, k, v)
			}
			// Values may override parts of the object: validate what they produced.
			if obj, ok := lookupPath(data, "request.object"); ok {
				if m, ok := obj.(map[string]any); ok && e.req.Object != nil {
					e.obj, e.objOverridden = m, true
				}
			}
		}
	}
	e.base = data
	return data
}

// rule evaluates one matched rule. It reports no result (false) for a
// foreach that applied to no element, as Kyverno does.
func (e *evaluation) rule(rule *Rule) (RuleResult, bool) {
	if rule.Err != nil {
		return e.result(rule, Error, rule.Err.Error()), true
	}
	data := e.baseData()
	if len(rule.Raw.Context) > 0 || e.req.Values != nil {
		// Context entries and rule values write into the rule's data (at
		// the top level only: setPath copies what it descends into).
		data = cloneTop(data)
	}
	r, ok := e.evaluateRule(rule, data)
	if ok && rule.propertyVars {
		r.Properties = substituteProperties(r.Properties, data)
	}
	return r, ok
}

// substituteProperties resolves the variables of reportProperties values
// against the rule's data (its context entries included). A value whose
// variables cannot be resolved is reported as written.
func substituteProperties(props map[string]string, data map[string]any) map[string]string {
	out := make(map[string]string, len(props))
	for k, v := range props {
		out[k] = v
		if strings.Contains(v, "{{") {
			if s, err := variables.SubstituteString(v, data); err == nil {
				out[k] = s
			}
		}
	}
	return out
}

// evaluateRule evaluates a rule that compiled, on request data of its own
// when it has context entries or values to load into it.
func (e *evaluation) evaluateRule(rule *Rule, data map[string]any) (RuleResult, bool) {
	if r, done := e.ruleInputs(rule, data); done {
		return r, true
	}
	if rule.images != nil {
		if e.req.operation() == OpDelete || e.req.Subresource != "" {
			return RuleResult{}, false // Kyverno verifies no image of a DELETE or a subresource
		}
		r := e.checkImages(rule, data)
		return r, r.Result != ""
	}
	v := rule.Raw.Validate
	switch {
	case rule.pattern != nil:
		return e.checkPattern(rule, v.Message, data, e.obj, rule.pattern, rule.patternVars), true
	case rule.anyPattern != nil:
		return e.checkAnyPattern(rule, v.Message, data, e.obj, rule.anyPattern, rule.patternVars), true
	case rule.hasDeny:
		return e.checkDeny(rule, v.Message, data, rule.deny), true
	case rule.foreach != nil:
		return e.checkForEach(rule, data)
	case rule.podSecurity != nil:
		return e.checkPodSecurity(rule, data), true
	case rule.cel != nil:
		return e.checkCEL(rule), true
	}
	return e.result(rule, Error, "rule has no validation"), true
}

// preconditions evaluates a rule's (or a foreach's) preconditions; done is
// true when they decided the result: an error, or a skip when they do not
// hold ("preconditions not met", with the failing conditions' messages).
func (e *evaluation) preconditions(rule *Rule, conds any, data map[string]any) (RuleResult, bool) {
	ok, msg, err := conditions.AnyAll(conds, data, conditions.Preconditions)
	if err != nil {
		return e.result(rule, Error, "failed to evaluate preconditions: "+causeOf(err).Error()), true
	}
	if ok {
		return RuleResult{}, false
	}
	if msg != "" {
		return e.result(rule, Skip, "preconditions not met; "+msg), true
	}
	return e.result(rule, Skip, "preconditions not met"), true
}

// causeOf drops the "preconditions: " or "deny conditions: " prefix that
// conditions.AnyAll puts on its errors: the engine's messages say it.
func causeOf(err error) error {
	if inner := errors.Unwrap(err); inner != nil {
		return inner
	}
	return err
}

// exceptionSkip is the skip result of a rule exempted by PolicyExceptions.
// The message names them as "<namespace>/<name>" after Kyverno's prefix
// (which has no space for rule-level exceptions, and one for podSecurity
// exceptions: sep); the exceptions property lists their names only.
func (e *evaluation) exceptionSkip(rule *Rule, xs []*Exception, sep string) RuleResult {
	keys := make([]string, len(xs))
	names := make([]string, len(xs))
	for i, x := range xs {
		keys[i], names[i] = x.Name, x.ObjectName
	}
	r := e.result(rule, Skip, "rule is skipped due to policy exceptions"+sep+strings.Join(keys, ", "))
	r.Exceptions = names
	return r
}

func (e *evaluation) message(msg string, data map[string]any) string {
	if msg == "" || !strings.Contains(msg, "{{") {
		return msg
	}
	out, err := variables.SubstituteString(msg, data)
	if err != nil {
		return msg
	}
	return out
}

func (e *evaluation) checkPattern(rule *Rule, msg string, data map[string]any, obj any, pat any, hasVars bool) RuleResult {
	if hasVars {
		var err error
		if pat, err = variables.Substitute(pat, data); err != nil {
			return e.result(rule, Error, "variable substitution failed: "+err.Error())
		}
	}
	res := pattern.Validate(obj, pat)
	switch res.Status {
	case pattern.Pass:
		return e.result(rule, Pass, passMessage(rule.Name))
	case pattern.Skip:
		return e.result(rule, Skip, res.Message)
	}
	if pattern.AnchorKeysMissing(obj, pat) {
		return e.result(rule, Error, executionErrorMessage(e.message(msg, data), msg, rule.Name, res.Message))
	}
	return e.result(rule, Fail, failMessage(e.message(msg, data), msg, rule.Name, res.Path))
}

// executionErrorMessage is Kyverno's message of a pattern that failed where
// an anchor key of it was found in no resource object (AnchorKeysMissing):
// an error, quoting the failure.
func executionErrorMessage(msg, raw, rule, cause string) string {
	if raw == "" {
		return "validation error: rule " + rule + " execution error: " + cause
	}
	return "validation error: " + withPeriod(msg) + " rule " + rule + " execution error: " + cause
}

func (e *evaluation) checkAnyPattern(rule *Rule, msg string, data map[string]any, obj any, pats []any, hasVars bool) RuleResult {
	list := pats
	if hasVars {
		subst, err := variables.Substitute(any(pats), data)
		if err != nil {
			return e.result(rule, Error, "variable substitution failed: "+err.Error())
		}
		list, _ = subst.([]any)
	}
	// The first pattern that passes decides; else any failure fails the
	// rule, naming every failing pattern; else, when every pattern was
	// skipped by its anchors, the rule is skipped.
	var fails, skips []string
	for i, p := range list {
		res := pattern.Validate(obj, p)
		switch res.Status {
		case pattern.Pass:
			return e.result(rule, Pass, fmt.Sprintf("validation rule '%s' anyPattern[%d] passed.", rule.Name, i))
		case pattern.Skip:
			skips = append(skips, fmt.Sprintf("rule %s[%d] skipped: %s", rule.Name, i, res.Message))
		default:
			fails = append(fails, fmt.Sprintf("rule %s[%d] failed at path %s", rule.Name, i, res.Path))
		}
	}
	switch {
	case len(fails) > 0:
		m := e.message(msg, data)
		if m == "" {
			return e.result(rule, Fail, "validation error: "+strings.Join(fails, " "))
		}
		return e.result(rule, Fail, "validation error: "+withPeriod(m)+" "+strings.Join(fails, " "))
	case len(skips) > 0:
		return e.result(rule, Skip, strings.Join(skips, " "))
	}
	return e.result(rule, Pass, e.message(msg, data))
}

// checkDeny fails the rule when its deny conditions hold, with the rule's
// message followed by the messages of the conditions that held ("; "
// between them), substituted; when the substitution fails, the conditions'
// messages alone, as Kyverno.
func (e *evaluation) checkDeny(rule *Rule, msg string, data map[string]any, deny any) RuleResult {
	denied, condMsg, err := conditions.AnyAll(deny, data, conditions.Deny)
	if err != nil {
		return e.result(rule, Error, "failed to check deny conditions: "+causeOf(err).Error())
	}
	if !denied {
		return e.result(rule, Pass, passMessage(rule.Name))
	}
	if msg == "" && condMsg == "" {
		return e.result(rule, Fail, "validation error: rule "+rule.Name+" failed")
	}
	m := msg
	switch {
	case m == "":
		m = condMsg
	case condMsg != "":
		m += "; " + condMsg
	}
	if strings.Contains(m, "{{") {
		s, err := variables.SubstituteString(m, data)
		if err != nil {
			return e.result(rule, Fail, condMsg)
		}
		m = s
	}
	return e.result(rule, Fail, m)
}

// failMessage is the message of a pattern failure: the rule's message
// (substituted: msg; as written: raw), ended by a period, then the rule and
// the path where the pattern failed.
func failMessage(msg, raw, rule, path string) string {
	if raw == "" {
		return "validation error: rule " + rule + " failed at path " + path
	}
	return "validation error: " + withPeriod(msg) + " rule " + rule + " failed at path " + path
}

// withPeriod ends a message with a period unless it already has one.
func withPeriod(msg string) string {
	if strings.HasSuffix(msg, ".") {
		return msg
	}
	return msg + "."
}
