package tester

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"k8s.io/apimachinery/pkg/runtime"
	"os"
	"path/filepath"
	"strings"

	policiesv1 "github.com/tally-dev/tally/api/policies/v1"
	"github.com/tally-dev/tally/controllers/data"
	"github.com/tally-dev/tally/engine/cel"

	sigsyaml "sigs.k8s.io/yaml"

	"github.com/tally-dev/tally/engine"
)

// Outcome is the check of one expectation: one policy, rule and resource.
type Outcome struct {
	File     string `json:"file"`
	Test     string `json:"test"`
	Policy   string `json:"policy"`
	Rule     string `json:"rule"`
	Resource string `json:"resource"`
	Expected string `json:"expected"`
	Got      string `json:"got,omitempty"`
	Status   Status `json:"status"`
	Reason   string `json:"reason,omitempty"`
}

// loaded is everything a test file names, read once.
type loaded struct {
	dir        string
	test       *Test
	policies   []*LoadedPolicy
	resources  []resource
	exceptions Exceptions
	params     paramObjects
	userInfo   *engine.UserInfo
	nsLabels   map[string]map[string]string
	// cluster serves what policies read of the cluster (context and
	// clusterResources); nil when the test names neither.
	cluster *data.Offline
	// live, when set, serves every context entry (RunFileLive); the values
	// naming contextNames are dropped.
	live         *Live
	contextNames map[string]bool
	// images verifies images (nil: verifyImages rules are skipped).
	images engine.ImageVerifier
	// registry reads image data from the registries (nil: none).
	registry cel.ImageData
	// targets are the test's targetResources (mutateExisting).
	targets []map[string]any
	// targetData serves targets to CEL's resource library (built at the
	// first MutatingPolicy expectation that needs it: targetsData).
	targetData    *data.Offline
	targetDataErr error
	targetDataSet bool
	// mocks serve the test's apiCallResponses and globalContextEntries
	// (nil: it has none).
	mocks *mocks
	// sources are the clone sources the test names (cloneSources).
	sources []map[string]any
	// mutations caches what classic mutate rules did (mutatedBy).
	mutations map[mutationKey]mutated
}

type resource struct {
	obj             map[string]any
	name, namespace string
	// json marks a JSON payload (jsonPayloads): name is its file as the
	// test names it.
	json bool
	// authz marks an authorization request ("Envoy" or "HTTP": envoyPayloads,
	// httpPayloads), named as json's.
	authz string
}

// RunFile runs every test document of a kyverno-test.yaml file. An error
// means the file itself could not be read; problems with what it names are
// reported on the affected expectations.
func RunFile(ctx context.Context, file string) ([]Outcome, error) {
	r, err := runFile(ctx, file, runEnv{})
	return r.outcomes, err
}

// runEnv is what a run gives every test: a live cluster to read (nil:
// the test's values) and an image verifier (nil: registry access off).
type runEnv struct {
	live     *Live
	images   engine.ImageVerifier
	registry cel.ImageData
}

// Live is a cluster a test's policies read instead of the values its
// values file gives their context entries: the data loader of a scanner
// (integration tests run the corpus's policies that read the cluster
// against objects made for them).
type Live struct {
	Loader engine.ContextLoader
	Data   cel.ClusterData
}

// RunFileLive is RunFile with the policies reading live: the values that
// name a context entry of a policy are dropped (request values and the
// like stay), and every context entry is loaded by live.
func RunFileLive(ctx context.Context, file string, live *Live) ([]Outcome, error) {
	r, err := runFile(ctx, file, runEnv{live: live})
	return r.outcomes, err
}

// fileRun is what running one test file gave.
type fileRun struct {
	outcomes []Outcome
	// invalid says why each policy the file names was refused (one line
	// per policy, naming its file and field paths).
	invalid []string
	// unreadable are the files a test names that could not be read, or
	// are not what they should be (a resource file that is not Kubernetes
	// YAML): the expectations of that test fail with the same reason.
	unreadable []string
}

// runFile is RunFile that also returns the refused policies and the
// unreadable inputs of its tests.
func runFile(ctx context.Context, file string, env runEnv) (fileRun, error) {
	var r fileRun
	docs, err := ReadDocuments(file)
	if err != nil {
		return r, err
	}
	for _, d := range docs {
		t, err := testOf(file, d)
		if err != nil {
			return r, err
		}
		outs, inv, loadErr := runTest(ctx, file, t, env)
		r.outcomes = append(r.outcomes, outs...)
		r.invalid = append(r.invalid, inv...)
		if loadErr != nil {
			r.unreadable = append(r.unreadable, fmt.Sprintf("%s: test %s: %v", file, t.Metadata.Name, loadErr))
		}
	}
	return r, nil
}

// testOf decodes one document of a test file.
func testOf(file string, d Document) (*Test, error) {
	data, err := sigsyaml.Marshal(d.Object)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var t Test
	if err := sigsyaml.Unmarshal(data, &t); err != nil {
		return nil, fmt.Errorf("%s: not a Test: %w", file, err)
	}
	if t.APIVersion == "" || t.Kind == "" {
		return nil, fmt.Errorf("%s: not a Test: apiVersion and kind are required", file)
	}
	for _, k := range notReadInputs {
		if v, ok := d.Object[k]; ok && v != nil && v != "" {
			t.NotRead = append(t.NotRead, k)
		}
	}
	return &t, nil
}

func runTest(ctx context.Context, file string, t *Test, env runEnv) ([]Outcome, []string, error) {
	l, loadErr := load(file, t)
	l.images, l.registry = env.images, env.registry
	if env.live != nil {
		l.live = env.live
		l.contextNames = map[string]bool{}
		for _, lp := range l.policies {
			if lp.Policy == nil {
				continue
			}
			for _, r := range lp.Policy.Rules {
				for _, c := range r.Raw.Context {
					l.contextNames[c.Name] = true
				}
			}
		}
	}
	var invalid []string
	for _, lp := range l.policies {
		if lp.Invalid != nil {
			invalid = append(invalid, lp.Invalid.Error())
		}
	}
	responses := map[[2]int][]engine.RuleResult{}
	evaluate := func(pi, ri int) []engine.RuleResult {
		key := [2]int{pi, ri}
		if r, ok := responses[key]; ok {
			return r
		}
		r := l.evaluate(ctx, l.policies[pi], l.resources[ri], "")
		responses[key] = r
		return r
	}

	var out []Outcome
	for _, tr := range t.Results {
		expected := tr.Result
		if expected == "" {
			expected = tr.Status
		}
		names := tr.Resources
		if tr.Resource != "" {
			names = append(names, tr.Resource)
		}
		if len(names) == 0 {
			for _, r := range l.resources {
				names = append(names, r.name)
			}
		}
		if len(names) == 0 {
			// Nothing to evaluate the expectation on: never a pass (a test
			// file that evaluated nothing does not exit 0).
			o := Outcome{File: file, Test: t.Metadata.Name, Policy: tr.Policy, Rule: tr.Rule, Expected: expected, Status: Unsupported,
				Reason: "the expectation names no resource, and the test has none: nothing was evaluated"}
			if len(t.NotRead) > 0 {
				o.Reason = fmt.Sprintf("the test's %s are not evaluated by tally", strings.Join(t.NotRead, ", "))
			}
			out = append(out, o)
			continue
		}
		for _, name := range names {
			o := Outcome{File: file, Test: t.Metadata.Name, Policy: tr.Policy, Rule: tr.Rule, Resource: name, Expected: expected}
			switch {
			case len(t.NotRead) > 0:
				o.Status, o.Reason = Unsupported, fmt.Sprintf("the test's %s are not evaluated by tally", strings.Join(t.NotRead, ", "))
			case (tr.PatchedResources != "" && !l.mutatingPolicy(tr) && !l.classicMutation(tr)) || ((tr.GeneratedResource != "" || tr.CloneSource != "" || len(tr.GeneratedList) > 0) && !l.classicGeneration(tr)):
				o.Status, o.Reason = Unsupported, "mutate and generate results are not supported"
			case loadErr != nil:
				o.Status, o.Reason = Failed, loadErr.Error()
			default:
				l.check(ctx, &o, tr, evaluate)
			}
			out = append(out, o)
		}
	}
	return out, invalid, loadErr
}

// check decides one expectation.
func (l *loaded) check(ctx context.Context, o *Outcome, tr TestResult, evaluate func(pi, ri int) []engine.RuleResult) {
	pi := l.policyIndexFor(tr)
	if pi < 0 {
		o.Status, o.Reason = Failed, fmt.Sprintf("policy %s not found", tr.Policy)
		return
	}
	lp := l.policies[pi]
	switch {
	case lp.Unsupported != nil:
		o.Status, o.Reason = Failed, lp.Unsupported.Error()
		return
	case lp.Invalid != nil:
		o.Status, o.Reason = Skipped, "invalid policy: "+lp.Invalid.Error()
		return
	}
	if lp.Policy.GenerateRule(tr.Rule) || lp.Policy.GeneratesCEL() {
		l.checkGeneration(ctx, o, tr, pi)
		return
	}
	if lp.Policy.MutateRule(tr.Rule) || (tr.Rule == "" && lp.Policy.MutatesClassic() && len(lp.Policy.Rules) == 0) {
		l.checkClassicMutation(ctx, o, tr, pi)
		return
	}
	// R46: an expectation of a rule tally does not evaluate is never a pass.
	if lr, ok := lp.Policy.LeftOutOf(tr.Rule); ok || (tr.Rule == "" && lp.Policy.EvaluatesNothing()) {
		if !ok {
			lr = lp.Policy.LeftOut[0]
		}
		o.Status, o.Reason = Unsupported, fmt.Sprintf("rule %s is a %s rule: %s", lr.Name, lr.Type, engine.NotEvaluatedNote)
		return
	}
	if lp.Policy.Mutating() {
		l.checkMutation(ctx, o, tr, lp)
		return
	}
	expected := o.Expected
	if expected == "fail" && !lp.Policy.Scored {
		expected = "warn"
	}
	found, responded := false, false
	for ri, r := range l.resources {
		if !resourceNamed(r, o.Resource) {
			continue
		}
		found = true
		var results []engine.RuleResult
		if tr.Operation() != "" {
			results = l.evaluate(ctx, lp, r, tr.Operation())
		} else {
			results = evaluate(pi, ri)
		}
		if len(results) == 0 {
			if r.json || r.authz != "" {
				// A payload answers only the policies of its mode: one the
				// policy does not evaluate was not evaluated, never a pass.
				o.Status, o.Reason = Failed, fmt.Sprintf("policy %s does not evaluate %s payloads (its evaluation mode is %s)", tr.Policy, payloadKind(r), lp.Policy.EvaluationMode())
				return
			}
			continue // the policy does not apply to this resource: counts as a pass
		}
		responded = true
		got := ""
		for _, rr := range results {
			if rr.Source != "" || tr.Rule == "" || engine.RuleNamed(rr.Rule, tr.Rule) {
				if rr.Result == engine.Skip && rr.Message == engine.RegistryOffMessage {
					// Not evaluated (--registry=false): never a pass, whatever
					// is expected, and the run does not pass either.
					o.Got, o.Status, o.Reason = string(rr.Result), Unsupported, rr.Message
					return
				}
				got = string(rr.Result)
				if got != expected {
					o.Reason = rr.Message
					break
				}
			}
		}
		o.Got = got
		if got == "" {
			if !lp.Policy.HasRule(tr.Rule) {
				// Kyverno's CLI prints no row for a rule the policy does not
				// have; it is a defect of the test, counted apart.
				o.Status, o.Reason = Skipped, fmt.Sprintf("the policy has no rule %s (the test names a rule that does not exist)", tr.Rule)
				return
			}
			// The rule exists but does not apply to this resource: as with a
			// policy that does not apply, that counts as a pass.
			o.Status, o.Reason = Passed, fmt.Sprintf("excluded: rule %s does not apply to %s", tr.Rule, o.Resource)
			return
		}
		if got != expected {
			o.Status = Failed
			return
		}
	}
	o.settle(found, responded)
}

// settle decides an expectation no result contradicted: its resource was
// found (else it fails), and the policy applied to it (else it is
// excluded, which counts as a pass).
func (o *Outcome) settle(found, responded bool) {
	switch {
	case !found:
		o.Status, o.Reason = Failed, fmt.Sprintf("resource %s not found", o.Resource)
	case !responded:
		o.Status, o.Reason = Passed, "excluded: the policy does not apply to the resource"
	default:
		o.Status = Passed
	}
}

// Operation of a TestResult, from the older `operation` field if present.
func (tr TestResult) Operation() string { return strings.ToUpper(tr.Op) }

// resourceNamed matches an expectation's "name" or "namespace/name"; a
// manifest without a namespace is in "default", as Kyverno's CLI reads it.
func resourceNamed(r resource, name string) bool {
	ns := r.namespace
	if ns == "" {
		ns = "default"
	}
	return name == r.name || name == ns+"/"+r.name
}

// policyIndex finds an expectation's policy: by name, and by kind when the
// expectation says it is a ValidatingPolicy or ValidatingAdmissionPolicy
// (a ClusterPolicy may have the same name).
func (l *loaded) policyIndexFor(tr TestResult) int {
	if tr.IsValidatingPol || tr.IsVAP || tr.IsMutatingPol || tr.IsMAP || tr.IsImageValPol || tr.IsDeletingPol || tr.IsGeneratingPol {
		for i, p := range l.policies {
			cel := p.Kind == policiesv1.KindValidatingPolicy || p.Kind == policiesv1.KindNamespacedValidatingPolicy
			switch {
			case tr.IsVAP:
				cel = p.Kind == kindVAP
			case tr.IsMAP:
				cel = p.Kind == kindMAP
			case tr.IsMutatingPol:
				cel = p.Kind == policiesv1.KindMutatingPolicy || p.Kind == policiesv1.KindNamespacedMutatingPolicy
			case tr.IsGeneratingPol:
				cel = p.Kind == engine.KindGeneratingPolicy || p.Kind == engine.KindNamespacedGeneratingPolicy
			case tr.IsDeletingPol:
				cel = p.Kind == engine.KindDeletingPolicy || p.Kind == engine.KindNamespacedDeletingPolicy
			case tr.IsImageValPol:
				cel = p.Kind == policiesv1.KindImageValidatingPolicy || p.Kind == policiesv1.KindNamespacedImageValidatingPolicy
			}
			if !cel {
				continue
			}
			if _, plain, _ := strings.Cut(p.Name, "/"); p.Name == tr.Policy || plain == tr.Policy {
				return i
			}
		}
	}
	return l.policyIndex(tr.Policy)
}

func (l *loaded) policyIndex(name string) int {
	for i, p := range l.policies {
		if p.Name == name {
			return i
		}
	}
	for i, p := range l.policies {
		if _, plain, ok := strings.Cut(p.Name, "/"); ok && plain == name {
			return i
		}
	}
	return -1
}

// evaluate runs one policy on one resource as Kyverno's CLI does: as a CREATE
// (or the operation the values or the expectation name) with the test's user.
func (l *loaded) evaluate(ctx context.Context, lp *LoadedPolicy, r resource, op string) []engine.RuleResult {
	if lp.Policy == nil {
		return nil
	}
	return lp.Policy.Evaluate(ctx, l.request(lp, r, op))
}

// request is the request a policy is evaluated on for a resource.
func (l *loaded) request(lp *LoadedPolicy, r resource, op string) *engine.Request {
	vs := &valueSource{spec: l.test.Values, resource: r.name, drop: l.contextNames}
	if op == "" {
		if v, ok := vs.policyValues(lp.Name)[operationKey].(string); ok {
			op = strings.ToUpper(v)
		}
	}
	req := &engine.Request{
		Object:          r.obj,
		Operation:       op,
		UserInfo:        l.userInfo,
		NamespaceLabels: l.namespaceLabels(r),
		Exceptions:      l.exceptions.Classic,
		CELExceptions:   l.exceptions.CEL,
		Params:          l.params,
		Values:          vs,
		Images:          l.images,
		Registry:        l.registry,
	}
	req.Subresource, req.Parent = l.test.Values.SubresourceOf(r.obj)
	req.Namespace = l.namespaceObject(r)
	req.JSON, req.Authz = r.json, r.authz
	if l.cluster != nil {
		req.Loader, req.Data = l.cluster, l.cluster
	}
	if l.mocks != nil {
		req.Loader, req.Data = l.mocks, l.mocks
	}
	if l.live != nil {
		req.Loader, req.Data = l.live.Loader, l.live.Data
	}
	switch op {
	case engine.OpDelete:
		req.Object, req.OldObject = nil, r.obj
	case engine.OpUpdate:
		req.OldObject = r.obj
	}
	return req
}

func (l *loaded) namespaceLabels(r resource) map[string]string {
	ns := r.namespace
	kind, _ := r.obj["kind"].(string)
	switch {
	case kind == "Namespace":
		ns = r.name
	case ns == "" && !clusterScoped[kind]:
		ns = "default" // as the resource is evaluated (defaultNamespace)
	}
	if ns == "" {
		return nil
	}
	return l.nsLabels[ns]
}

// namespaceObject is the resource's namespace as the test's values give it
// (values.namespaces: annotations included), for CEL's namespaceObject;
// nil when they do not.
func (l *loaded) namespaceObject(r resource) map[string]any {
	if l.test.Values == nil || len(l.test.Values.Namespaces) == 0 {
		return nil
	}
	ns := r.namespace
	if kind, _ := r.obj["kind"].(string); ns == "" && !clusterScoped[kind] {
		ns = "default"
	}
	for i := range l.test.Values.Namespaces {
		n := &l.test.Values.Namespaces[i]
		if n.Name != ns || ns == "" {
			continue
		}
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(n)
		if err != nil {
			return nil
		}
		obj["apiVersion"], obj["kind"] = "v1", "Namespace"
		md, _ := obj["metadata"].(map[string]any)
		if md != nil {
			labels, _ := md["labels"].(map[string]any)
			if labels == nil {
				labels = map[string]any{}
				md["labels"] = labels
			}
			labels["kubernetes.io/metadata.name"] = ns
		}
		return obj
	}
	return nil
}

// load reads everything a test names. Unreadable parts make the whole test
// fail with a message naming the file and the problem.
func load(file string, t *Test) (*loaded, error) {
	dir := filepath.Dir(file)
	l := &loaded{dir: dir, test: t, nsLabels: map[string]map[string]string{}}
	rel := func(paths []string) []string {
		out := make([]string, 0, len(paths))
		seen := map[string]bool{}
		for _, p := range paths {
			if !filepath.IsAbs(p) {
				p = filepath.Join(dir, p)
			}
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
		return out
	}
	var errs []error
	var err error
	if l.policies, err = LoadPolicies(rel(t.Policies)); err != nil {
		errs = append(errs, err)
	}
	for _, p := range rel(t.Resources) {
		docs, err := ReadManifests(p)
		if err != nil {
			errs = append(errs, err)
		}
		for _, d := range docs {
			md, _ := d.Object["metadata"].(map[string]any)
			name, _ := md["name"].(string)
			ns, _ := md["namespace"].(string)
			l.resources = append(l.resources, resource{obj: defaultNamespace(d.Object), name: name, namespace: ns})
		}
	}
	for i, p := range rel(t.JSONPayloads) {
		obj, err := readPayload(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("JSON payload %s: %w", t.JSONPayloads[i], err))
			continue
		}
		l.resources = append(l.resources, resource{obj: obj, name: t.JSONPayloads[i], json: true})
	}
	for _, kind := range []struct {
		name  string
		files []string
	}{{"Envoy", t.EnvoyPayloads}, {"HTTP", t.HTTPPayloads}} {
		for i, p := range rel(kind.files) {
			obj, err := readPayload(p)
			if err == nil && kind.name == "HTTP" {
				err = httpRequestDefaults(obj)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s payload %s: %w", kind.name, kind.files[i], err))
				continue
			}
			l.resources = append(l.resources, resource{obj: obj, name: kind.files[i], authz: kind.name})
		}
	}
	for _, p := range rel(t.TargetResources) {
		docs, err := ReadManifests(p)
		if err != nil {
			errs = append(errs, err)
		}
		for _, d := range docs {
			l.targets = append(l.targets, defaultNamespace(d.Object))
		}
	}
	if l.exceptions, err = LoadExceptions(rel(t.Exceptions)); err != nil {
		errs = append(errs, err)
	}
	for _, p := range rel(t.ParamResources) {
		docs, err := ReadManifests(p)
		if err != nil {
			errs = append(errs, err)
		}
		for _, d := range docs {
			l.params = append(l.params, d.Object)
		}
	}
	var clusterFiles []string
	if t.Context != "" {
		clusterFiles = rel([]string{t.Context})
	}
	if l.cluster, err = ReadContext(append(clusterFiles, rel(t.ClusterResources)...)...); err != nil {
		errs = append(errs, err)
	}
	if len(t.APICallResponses) > 0 || len(t.GlobalContextEntries) > 0 {
		if l.mocks, err = newMocks(dir, t.APICallResponses, t.GlobalContextEntries); err != nil {
			errs = append(errs, err)
		} else if l.cluster != nil {
			l.mocks.cluster = l.cluster
		}
	}
	if t.Variables != "" {
		var v ValuesSpec
		if err := readInto(rel([]string{t.Variables})[0], &v); err != nil {
			errs = append(errs, err)
		} else {
			t.Values = mergeValues(t.Values, &v)
		}
	}
	if t.UserInfo != "" {
		var u UserInfoSpec
		if err := readInto(rel([]string{t.UserInfo})[0], &u); err != nil {
			errs = append(errs, err)
		} else {
			l.userInfo = &engine.UserInfo{
				Username: u.UserInfo.Username, UID: u.UserInfo.UID, Groups: u.UserInfo.Groups,
				Extra: u.UserInfo.Extra, Roles: u.Roles, ClusterRoles: u.ClusterRoles,
			}
		}
	}
	if t.Values != nil {
		for _, s := range t.Values.NamespaceSelector {
			l.nsLabels[s.Name] = s.Labels
		}
		for _, ns := range t.Values.Namespaces {
			l.nsLabels[ns.Name] = ns.Labels
		}
	}
	return l, errors.Join(errs...)
}

func readInto(file string, into any) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	if err := sigsyaml.Unmarshal(data, into); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	return nil
}

func mergeValues(inline, file *ValuesSpec) *ValuesSpec {
	if inline == nil {
		return file
	}
	merged := *file
	merged.Policies = append(append([]PolicyValues{}, file.Policies...), inline.Policies...)
	merged.NamespaceSelector = append(append([]NamespaceSelector{}, file.NamespaceSelector...), inline.NamespaceSelector...)
	merged.Namespaces = append(append(merged.Namespaces[:0:0], file.Namespaces...), inline.Namespaces...)
	merged.Subresources = append(append([]Subresource{}, file.Subresources...), inline.Subresources...)
	merged.GlobalValues = map[string]any{}
	for k, v := range file.GlobalValues {
		merged.GlobalValues[k] = v
	}
	for k, v := range inline.GlobalValues {
		merged.GlobalValues[k] = v
	}
	return &merged
}

// payloadKind names the kind of a payload resource.
func payloadKind(r resource) string {
	if r.json {
		return "JSON"
	}
	return r.authz
}

// httpRequestDefaults gives an HTTP authorization request the attributes
// it does not set, as Kyverno's CLI reads one into its request type (empty
// strings, maps and zero): a policy reads object.attributes.path or
// .header of any request. Attributes that are not an object are an error.
func httpRequestDefaults(obj map[string]any) error {
	attrs, ok := obj["attributes"].(map[string]any)
	if !ok {
		if obj["attributes"] != nil {
			return fmt.Errorf("attributes must be an object")
		}
		attrs = map[string]any{}
		obj["attributes"] = attrs
	}
	for k, zero := range map[string]any{
		"method": "", "header": map[string]any{}, "host": "", "protocol": "", "contentLength": int64(0),
		"body": "", "scheme": "", "path": "", "query": map[string]any{}, "fragment": "",
	} {
		if attrs[k] == nil {
			attrs[k] = zero
		}
	}
	return nil
}

// readPayload reads a JSON payload: a JSON (or YAML) document whose top
// level is an object.
func readPayload(path string) (map[string]any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	raw, err := sigsyaml.YAMLToJSON(data)
	if err != nil {
		return nil, err
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	obj, ok := v.(map[string]any)
	if !ok || obj == nil {
		return nil, fmt.Errorf("a JSON payload must be a top-level object")
	}
	return obj, nil
}
