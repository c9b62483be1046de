package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/gobwas/glob"
	"github.com/google/go-containerregistry/pkg/name"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	policiesv1 "github.com/tally-dev/tally/api/policies/v1"
	"github.com/tally-dev/tally/engine/cel"
	"github.com/tally-dev/tally/engine/imageverify"
)

// SourceImageValidatingPolicy is the source of ImageValidatingPolicy results.
const SourceImageValidatingPolicy = "KyvernoImageValidatingPolicy"

// imagePolicy is what an ImageValidatingPolicy adds to the evaluation of a
// ValidatingPolicy (R42): the images it selects, its attestors and
// attestations, and its digest and verification requirements.
type imagePolicy struct {
	spec         policiesv1.ImageValidatingPolicySpec
	globs        []glob.Glob
	refs         []*cel.RefMatcher
	verifyDigest bool
	required     bool
	attestors    map[string]*ivAttestor
	// attestorValues and attestationNames are `attestors` and
	// `attestations` as the validations read them.
	attestorValues   map[string]any
	attestationNames map[string]string
	attestations     map[string]policiesv1.ImageAttestation
	credentials      *imageverify.RegistryCredentials
	// extractors are the indexes of Spec.Extras that are the policy's
	// `images` expressions (by name); the attestors' expressions follow.
	extractors map[string]int
	// identity ties cached verifications to the policy as written.
	identity string
	// unsupported says what of the policy tally does not verify: using its
	// functions is an error result that says so.
	unsupported string
	// json is evaluation.mode JSON: the policy never matches a resource.
	json bool
}

// ivAttestor is one attestor of the policy, as a verifyImages attestor.
type ivAttestor struct {
	name   string
	notary bool
	// unsupported says what of the attestor tally does not verify: using
	// it is an error result that says so, never a pass.
	unsupported string
	entry       imageverify.Attestor
	repository  string
	// keyless are the entries of a keyless attestor: one per identity.
	keyless []imageverify.Keyless
	// keyExtra, certExtra, chainExtra and tsaExtra are the Spec.Extras
	// indexes of its expressions (-1: none).
	keyExtra, certExtra, chainExtra, tsaExtra int
}

// CompileImageValidatingPolicy compiles an ImageValidatingPolicy or (with
// its namespace set) a NamespacedImageValidatingPolicy. A policy with an
// expression that does not compile is refused, naming every such
// expression.
func CompileImageValidatingPolicy(ivp *policiesv1.ImageValidatingPolicy) (*Policy, error) {
	p := newCELPolicy(&ivp.ObjectMeta, ivp.Kind, policiesv1.KindImageValidatingPolicy, policiesv1.KindNamespacedImageValidatingPolicy, SourceImageValidatingPolicy)
	kind, name := p.Kind, p.Name
	spec := ivp.Spec
	ip := &imagePolicy{
		spec:             spec,
		verifyDigest:     spec.ValidationConfigurations.DigestVerified(),
		required:         spec.ValidationConfigurations.VerificationRequired(),
		attestors:        map[string]*ivAttestor{},
		attestorValues:   map[string]any{},
		attestationNames: map[string]string{},
		attestations:     map[string]policiesv1.ImageAttestation{},
		extractors:       map[string]int{},
	}
	if c := spec.Credentials; c != nil {
		ip.credentials = &imageverify.RegistryCredentials{AllowInsecureRegistry: c.AllowInsecureRegistry, Secrets: c.Secrets}
		for _, p := range c.Providers {
			if p != "default" {
				ip.unsupported = "credentials.providers " + p + " is not used by tally"
			}
		}
	}
	raw, _ := json.Marshal(spec)
	sum := sha256.Sum256(raw)
	ip.identity = kind + "/" + name + "/" + hex.EncodeToString(sum[:8])
	var errs []string
	for i, m := range spec.MatchImageReferences {
		switch {
		case m.Glob != "":
			g, err := glob.Compile(m.Glob)
			if err != nil {
				errs = append(errs, fmt.Sprintf("spec.matchImageReferences[%d].glob: %v", i, err))
				continue
			}
			ip.globs = append(ip.globs, g)
		case m.Expression != "":
			r, err := cel.CompileRefMatcher(m.Expression)
			if err != nil {
				errs = append(errs, fmt.Sprintf("spec.matchImageReferences[%d].expression: %v", i, err))
				continue
			}
			ip.refs = append(ip.refs, r)
		default:
			errs = append(errs, fmt.Sprintf("spec.matchImageReferences[%d]: a glob or an expression is required", i))
		}
	}
	var extras []admissionregistrationv1.Variable
	extra := func(name, expression string) int {
		extras = append(extras, admissionregistrationv1.Variable{Name: name, Expression: expression})
		return len(extras) - 1
	}
	for i, x := range spec.Images {
		if _, dup := ip.extractors[x.Name]; dup || x.Name == "" {
			errs = append(errs, fmt.Sprintf("spec.images[%d]: a name of its own is required (%q)", i, x.Name))
			continue
		}
		ip.extractors[x.Name] = extra("images."+x.Name, x.Expression)
	}
	for i, a := range spec.Attestors {
		if _, dup := ip.attestors[a.Name]; dup || a.Name == "" {
			errs = append(errs, fmt.Sprintf("spec.attestors[%d]: a name of its own is required (%q)", i, a.Name))
			continue
		}
		at, err := compileAttestor(a, extra)
		if err != nil {
			errs = append(errs, fmt.Sprintf("spec.attestors[%d] (%s): %v", i, a.Name, err))
			continue
		}
		ip.attestors[a.Name] = at
		var v map[string]any
		b, _ := json.Marshal(a)
		_ = json.Unmarshal(b, &v)
		ip.attestorValues[a.Name] = v
	}
	for i, a := range spec.Attestations {
		if _, dup := ip.attestations[a.Name]; dup || a.Name == "" || (a.InToto == nil) == (a.Referrer == nil) {
			errs = append(errs, fmt.Sprintf("spec.attestations[%d]: a name of its own and one of intoto or referrer are required", i))
			continue
		}
		ip.attestations[a.Name] = a
		ip.attestationNames[a.Name] = a.Name
	}
	if len(spec.Validations) == 0 {
		errs = append(errs, "spec.validations: at least one validation is required")
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s %s: %s", kind, name, strings.Join(errs, "; "))
	}
	vspec := policiesv1.ValidatingPolicySpec{
		MatchConstraints:     spec.MatchConstraints,
		MatchConditions:      spec.MatchConditions,
		Variables:            spec.Variables,
		Validations:          spec.Validations,
		AuditAnnotations:     spec.AuditAnnotations,
		ValidationActions:    spec.ValidationActions,
		FailurePolicy:        spec.FailurePolicy,
		Evaluation:           spec.Evaluation,
		WebhookConfiguration: spec.WebhookConfiguration,
		Autogen:              spec.Autogen,
	}
	if spec.Evaluation != nil && strings.EqualFold(spec.Evaluation.Mode, "JSON") {
		// JSON payload policies never match a resource.
		v := &validatingPolicy{kind: kind, spec: vspec, image: ip}
		ip.json = true
		p.vpol = v
		return p, nil
	}
	v, err := compileVariants(kind, name, vspec, cel.Spec{
		Mode:             cel.ModeImage,
		Namespaced:       p.Namespace != "",
		Variables:        spec.Variables,
		MatchConditions:  spec.MatchConditions,
		Validations:      spec.Validations,
		AuditAnnotations: spec.AuditAnnotations,
		Extras:           extras,
	})
	if err != nil {
		return nil, err
	}
	v.image = ip
	p.vpol = v
	return p, nil
}

// compileAttestor turns an attestor into a verifyImages attestor; its
// expressions become extras (extra gives their index).
func compileAttestor(a policiesv1.ImageAttestor, extra func(name, expression string) int) (*ivAttestor, error) {
	at := &ivAttestor{name: a.Name, keyExtra: -1, certExtra: -1, chainExtra: -1, tsaExtra: -1}
	switch {
	case a.Notary != nil && a.Cosign == nil:
		at.notary = true
		cert := &imageverify.Certificates{CTLog: &imageverify.CTLog{}}
		if s := a.Notary.Certs; s != nil {
			cert.Certificate = s.Value
			if s.Expression != "" {
				at.certExtra = extra("attestors."+a.Name+".notary.certs", s.Expression)
			}
		}
		if s := a.Notary.TSACerts; s != nil {
			cert.CTLog.TSACertChain = s.Value
			if s.Expression != "" {
				at.tsaExtra = extra("attestors."+a.Name+".notary.tsaCerts", s.Expression)
			}
		}
		at.entry.Certificates = cert
		return at, nil
	case a.Cosign == nil || a.Notary != nil:
		return nil, fmt.Errorf("one of cosign or notary is required")
	}
	c := a.Cosign
	rekor := &imageverify.Rekor{}
	ctlog := &imageverify.CTLog{}
	if l := c.CTLog; l != nil {
		rekor = &imageverify.Rekor{URL: l.URL, PubKey: l.RekorPubKey, IgnoreTlog: l.InsecureIgnoreTlog}
		ctlog = &imageverify.CTLog{PubKey: l.CTLogPubKey, IgnoreSCT: l.InsecureIgnoreSCT}
		if l.TSACertChain != "" {
			at.unsupported = "cosign.ctlog.tsaCertChain (signed timestamps) is not verified by tally"
		}
	}
	at.entry.Annotations = c.Annotations
	if c.Source != nil {
		at.repository = c.Source.Repository
		if len(c.Source.PullSecrets) > 0 || c.Source.TagPrefix != "" {
			at.unsupported = "cosign.source.PullSecrets and tagPrefix are not read by tally"
		}
	}
	if t := c.TUF; t != nil && (t.Mirror != "" || t.Root.Path != "" || t.Root.Data != "") {
		at.unsupported = "cosign.tuf (a trusted root other than sigstore's) is not read by tally"
	}
	switch {
	case c.Key != nil:
		k := c.Key
		if k.KMS != "" {
			at.unsupported = "cosign.key.kms: keys from a KMS are not read by tally"
		}
		if k.Expression != "" {
			at.keyExtra = extra("attestors."+a.Name+".cosign.key", k.Expression)
		}
		at.entry.Keys = &imageverify.StaticKeys{PublicKeys: k.Data, SignatureAlgorithm: k.HashAlgorithm, Rekor: rekor, CTLog: ctlog}
	case c.Certificate != nil:
		cert := &imageverify.Certificates{Rekor: rekor, CTLog: ctlog}
		if s := c.Certificate.Certificate; s != nil {
			cert.Certificate = s.Value
			if s.Expression != "" {
				at.certExtra = extra("attestors."+a.Name+".cosign.certificate.cert", s.Expression)
			}
		}
		if s := c.Certificate.CertificateChain; s != nil {
			cert.CertificateChain = s.Value
			if s.Expression != "" {
				at.chainExtra = extra("attestors."+a.Name+".cosign.certificate.certChain", s.Expression)
			}
		}
		at.entry.Certificates = cert
	case c.Keyless != nil:
		if len(c.Keyless.Identities) == 0 {
			return nil, fmt.Errorf("cosign.keyless.identities: at least one identity is required")
		}
		// Each identity is an attestor entry of its own (any one verifies).
		for _, id := range c.Keyless.Identities {
			at.keyless = append(at.keyless, imageverify.Keyless{Issuer: id.Issuer, IssuerRegExp: id.IssuerRegExp, Subject: id.Subject, SubjectRegExp: id.SubjectRegExp,
				Roots: c.Keyless.Roots, Rekor: rekor, CTLog: ctlog})
		}
	default:
		return nil, fmt.Errorf("cosign: one of key, certificate or keyless is required")
	}
	return at, nil
}

// compileVariants compiles a ValidatingPolicy's spec (s its CEL spec) and
// its autogen variants.
func compileVariants(kind, name string, spec policiesv1.ValidatingPolicySpec, base cel.Spec) (*validatingPolicy, error) {
	v := &validatingPolicy{kind: kind, spec: spec}
	v.ignore = spec.FailurePolicy != nil && *spec.FailurePolicy == admissionregistrationv1.Ignore
	variant := func(m *admissionregistrationv1.MatchResources, s cel.Spec) error {
		c, err := compileConstraints(m)
		if err != nil {
			return err
		}
		prog, err := cel.Compile(s)
		if err != nil {
			return err
		}
		v.variants = append(v.variants, &vpolVariant{match: c, spec: s, prog: prog})
		return nil
	}
	if err := variant(spec.MatchConstraints, base); err != nil {
		return nil, fmt.Errorf("%s %s: %w", kind, name, err)
	}
	var controllers []string
	listed := false
	if a := spec.Autogen; a != nil && a.PodControllers != nil && a.PodControllers.Controllers != nil {
		controllers, listed = a.PodControllers.Controllers, true
	}
	targets := autogenTargets(spec.MatchConstraints, controllers, listed)
	for _, config := range []string{"defaults", "cronjobs"} {
		rules, ok := targets[config]
		if !ok {
			continue
		}
		prefix := "spec.template."
		if config == "cronjobs" {
			prefix = "spec.jobTemplate.spec.template."
		}
		m := &admissionregistrationv1.MatchResources{
			NamespaceSelector: spec.MatchConstraints.NamespaceSelector,
			ResourceRules:     rules,
		}
		if err := variant(m, shiftSpec(base, prefix)); err != nil {
			return nil, fmt.Errorf("%s %s: autogen %s: %w", kind, name, config, err)
		}
	}
	return v, nil
}

// imageKinds are the kinds whose images an ImageValidatingPolicy reads
// without `images` expressions, as Kyverno's built-in extractors do.
var imageKinds = map[string]bool{"Pod": true, "Deployment": true, "StatefulSet": true, "DaemonSet": true, "ReplicaSet": true, "Job": true, "CronJob": true}

// builtinImages are the images of the pod spec of obj by list (containers,
// initContainers, ephemeralContainers), as written.
func builtinImages(obj map[string]any) map[string][]string {
	kind, _ := obj["kind"].(string)
	if !imageKinds[kind] {
		return map[string][]string{}
	}
	spec := podSpecOf(obj)
	out := map[string][]string{}
	for _, list := range [...]string{"containers", "initContainers", "ephemeralContainers"} {
		out[list] = listImages(spec, list)
	}
	return out
}

// selects reports whether the policy verifies an image: every image when
// it has no matchImageReferences.
func (ip *imagePolicy) selects(image string) (bool, error) {
	if len(ip.globs) == 0 && len(ip.refs) == 0 {
		return true, nil
	}
	for _, g := range ip.globs {
		if g.Match(image) {
			return true, nil
		}
	}
	for _, r := range ip.refs {
		ok, err := r.Matches(image)
		if err != nil {
			return false, fmt.Errorf("matchImageReferences: %w", err)
		}
		if ok {
			return true, nil
		}
	}
	return false, nil
}

// evaluateImages evaluates an ImageValidatingPolicy on a request whose
// match conditions hold (in the policy's input in): its images are
// extracted and selected, their digests checked, each read from its
// registry, then the validations run with the verification functions;
// every selected image must have been verified (required).
func (v *validatingPolicy) evaluateImages(e *evaluation, variant *vpolVariant, in *cel.Input) RuleResult {
	ip := v.image
	images := builtinImages(e.req.subject())
	for name, i := range ip.extractors {
		val, err := variant.prog.Extra(e.ctx, in, i)
		if err != nil {
			return e.ivpolError(fmt.Errorf("failed to extract images %s: %w", name, err))
		}
		list, err := stringList(val)
		if err != nil {
			return e.ivpolError(fmt.Errorf("failed to extract images %s: %w", name, err))
		}
		images[name] = list
	}
	selected := make(map[string][]string, len(images))
	var all []string
	for list, imgs := range images {
		selected[list] = []string{}
		for _, img := range imgs {
			ok, err := ip.selects(img)
			if err != nil {
				return e.ivpolError(err)
			}
			if ok {
				selected[list] = append(selected[list], img)
				all = append(all, img)
			}
		}
	}
	if ip.verifyDigest {
		for _, img := range all {
			ref, err := name.ParseReference(img)
			if err != nil {
				return e.ivpolError(fmt.Errorf("failed to parse image reference %s: %w", img, err))
			}
			if _, ok := ref.(name.Digest); !ok {
				return e.vpolResult(Fail, "", fmt.Sprintf("image %s does not have a digest", img), nil)
			}
		}
	}
	s := &imageSession{e: e, ip: ip, prog: variant.prog, in: in, selected: map[string]bool{}, tried: map[string]bool{}, verified: map[string]bool{},
		pullSecrets: pullSecrets(e.req.subject())}
	for _, img := range all {
		s.selected[img] = true
	}
	if len(all) > 0 {
		if e.req.Images == nil {
			r := e.vpolResult(Skip, "", RegistryOffMessage, nil)
			return r
		}
		for _, img := range all {
			if _, err := e.req.Images.Resolve(e.ctx, s.check(img, &imageverify.Verification{})); err != nil {
				return e.ivpolError(fmt.Errorf("failed to get imagedata: %w", err))
			}
		}
	}
	copied := *in
	copied.Images, copied.Attestors, copied.Attestations, copied.Verify = selected, ip.attestorValues, ip.attestationNames, s
	copied.ConditionsMet = true
	o := variant.prog.Evaluate(e.ctx, &copied)
	switch {
	case o.Err != nil:
		return e.ivpolError(o.Err)
	case o.AnnotationErr != nil:
		return e.ivpolError(o.AnnotationErr)
	case o.Failed >= 0:
		return e.vpolResult(Fail, "", vpolFailMessage(variant.prog, o), o.Annotations)
	}
	if ip.required {
		for _, img := range all {
			switch {
			case s.verified[img]:
			case s.tried[img]:
				return e.vpolResult(Fail, "", fmt.Sprintf("image %s failed signature or attestation verification", img), o.Annotations)
			default:
				return e.vpolResult(Fail, "", fmt.Sprintf("image %s is not verified: no policy performed a signature or attestation check on it", img), o.Annotations)
			}
		}
	}
	return e.vpolResult(Pass, "", "success", o.Annotations)
}

// ivpolError is the result of an ImageValidatingPolicy that could not be
// evaluated.
func (e *evaluation) ivpolError(err error) RuleResult {
	return e.vpolResult(Error, RuleEvaluation, "failed to evaluate policy: "+err.Error(), nil)
}

func stringList(v any) ([]string, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("want a list of strings, got %T", v)
	}
	out := make([]string, 0, len(list))
	for _, x := range list {
		s, ok := x.(string)
		if !ok {
			return nil, fmt.Errorf("want a list of strings, got an item of type %T", x)
		}
		out = append(out, s)
	}
	return out, nil
}

// imageSession serves the verification functions of one evaluation.
type imageSession struct {
	e    *evaluation
	ip   *imagePolicy
	prog *cel.Program
	in   *cel.Input
	// selected are the images the policy verifies; tried those a function
	// verified, successfully or not, and verified those it verified.
	selected, tried, verified map[string]bool
	// payloads are the statements of attestations verified, by image and
	// attestation.
	payloads map[string][]map[string]any
	// pullSecrets are the resource's imagePullSecrets (its credentials).
	pullSecrets []string
}

var _ cel.ImageVerification = (*imageSession)(nil)

// check is a verification of an image under entry, with the policy's
// credentials.
func (s *imageSession) check(image string, entry *imageverify.Verification) imageverify.Check {
	entry.ImageRegistryCredentials = s.ip.credentials
	return imageverify.Check{Image: image, Policy: s.e.policy.Name, Tenant: s.e.policy.Namespace != "", Entry: entry,
		Namespace: s.e.res.Namespace, PullSecrets: s.pullSecrets}
}

// attestor is the named attestor with its expressions evaluated.
func (s *imageSession) attestor(ctx context.Context, name string) (*ivAttestor, []imageverify.Attestor, error) {
	at, ok := s.ip.attestors[name]
	if !ok {
		return nil, nil, fmt.Errorf("attestor not found in policy: %s", name)
	}
	entry := at.entry
	str := func(i int, what string) (string, error) {
		v, err := s.prog.Extra(ctx, s.in, i)
		if err != nil {
			return "", fmt.Errorf("failed to evaluate %s in compiled attestor: %s, error: %w", what, name, err)
		}
		out, ok := v.(string)
		if !ok {
			return "", fmt.Errorf("failed to convert %s in compiled attestor: %s, error: want a string, got %T", what, name, v)
		}
		return out, nil
	}
	if at.keyExtra >= 0 {
		k := *entry.Keys
		var err error
		if k.PublicKeys, err = str(at.keyExtra, "key"); err != nil {
			return nil, nil, err
		}
		entry.Keys = &k
	}
	if at.certExtra >= 0 || at.chainExtra >= 0 || at.tsaExtra >= 0 {
		c := *entry.Certificates
		var err error
		if at.certExtra >= 0 {
			if c.Certificate, err = str(at.certExtra, "certificate"); err != nil {
				return nil, nil, err
			}
		}
		if at.chainExtra >= 0 {
			if c.CertificateChain, err = str(at.chainExtra, "certificate chain"); err != nil {
				return nil, nil, err
			}
		}
		if at.tsaExtra >= 0 {
			ct := *c.CTLog
			if ct.TSACertChain, err = str(at.tsaExtra, "tsa certificates"); err != nil {
				return nil, nil, err
			}
			c.CTLog = &ct
		}
		entry.Certificates = &c
	}
	if len(at.keyless) > 0 {
		entries := make([]imageverify.Attestor, len(at.keyless))
		for i := range at.keyless {
			one := entry
			one.Keyless = &at.keyless[i]
			entries[i] = one
		}
		return at, entries, nil
	}
	return at, []imageverify.Attestor{entry}, nil
}

// verify checks an image with each attestor: how many verified. A failed
// verification counts none; a registry that does not answer is an error.
func (s *imageSession) verify(ctx context.Context, image string, attestors []string, attestation *policiesv1.ImageAttestation) (int, error) {
	if !s.selected[image] {
		return 0, nil // not an image of the policy's
	}
	if s.e.req.Images == nil {
		return 0, fmt.Errorf("image verification is off: %s", RegistryOffMessage)
	}
	n := 0
	for _, name := range attestors {
		at, entries, err := s.attestor(ctx, name)
		if err != nil {
			return 0, err
		}
		if at.unsupported != "" {
			return 0, fmt.Errorf("failed to verify image %s with attestor %s: %s (docs/known-differences.md)", image, name, at.unsupported)
		}
		if s.ip.unsupported != "" {
			return 0, fmt.Errorf("failed to verify image %s: %s (docs/known-differences.md)", image, s.ip.unsupported)
		}
		entry := &imageverify.Verification{Type: imageverify.TypeCosign, Repository: at.repository}
		if at.notary {
			entry.Type = imageverify.TypeNotary
			if attestation != nil {
				return 0, fmt.Errorf("failed to verify image %s with attestor %s: notary attestations (OCI 1.1 referrers) are not verified by tally (docs/known-differences.md)", image, name)
			}
		}
		set := []imageverify.AttestorSet{{Count: intPtr(1), Entries: entries}}
		// The identity names the function, the attestor and the attestation
		// (no name can stand for another), and, for an attestor with
		// expressions, the values they gave.
		identity := s.ip.identity + "\x00sig\x00" + name
		if attestation != nil {
			if attestation.InToto == nil {
				return 0, fmt.Errorf("cosign verifier only supports intoto attestations, %s is a referrer", attestation.Name)
			}
			entry.Attestations = []imageverify.Attestation{{Type: attestation.InToto.Type, Attestors: set}}
			identity = s.ip.identity + "\x00att\x00" + name + "\x00" + attestation.Name
		} else {
			entry.Attestors = set
		}
		if at.keyExtra >= 0 || at.certExtra >= 0 || at.chainExtra >= 0 || at.tsaExtra >= 0 {
			b, _ := json.Marshal(entries)
			sum := sha256.Sum256(b)
			identity += "\x00" + hex.EncodeToString(sum[:8])
		}
		c := s.check(image, entry)
		c.Identity = identity
		c.Statements = attestation != nil
		o := s.e.req.Images.Verify(ctx, c)
		s.tried[image] = true
		switch o.Result {
		case string(Pass):
			n++
			s.verified[image] = true
			if attestation != nil && len(o.Statements) > 0 {
				if s.payloads == nil {
					s.payloads = map[string][]map[string]any{}
				}
				s.payloads[image+"\x00"+attestation.Name] = o.Statements[0]
			}
		case string(Error):
			return 0, fmt.Errorf("failed to get imagedata: %s", o.Message)
		}
	}
	return n, nil
}

func intPtr(i int) *int { return &i }

func (s *imageSession) VerifySignatures(ctx context.Context, image string, attestors []string) (int, error) {
	return s.verify(ctx, image, attestors, nil)
}

func (s *imageSession) VerifyAttestations(ctx context.Context, image, attestation string, attestors []string) (int, error) {
	a, ok := s.ip.attestations[attestation]
	if !ok {
		return 0, fmt.Errorf("attestation not found in policy: %s", attestation)
	}
	return s.verify(ctx, image, attestors, &a)
}

// Payload is the in-toto statement of an attestation the evaluation
// verified (Kyverno's payload: the statement, its predicate under
// `predicate`).
func (s *imageSession) Payload(_ context.Context, image, attestation string) (any, error) {
	a, ok := s.ip.attestations[attestation]
	if !ok {
		return nil, fmt.Errorf("attestation not found in policy: %s", attestation)
	}
	if a.InToto == nil {
		return nil, fmt.Errorf("failed to get payload: referrer attestations are not read by tally (docs/known-differences.md)")
	}
	statements := s.payloads[image+"\x00"+attestation]
	if len(statements) == 0 {
		return nil, fmt.Errorf("failed to get payload: intoto attestation payload cannot be fetch before verifying intoto attestation")
	}
	return statements[0], nil
}

// ImageData is the image's metadata, read through the request's cluster
// data (as image.GetMetadata).
func (s *imageSession) ImageData(ctx context.Context, image string) (map[string]any, error) {
	if s.e.policy.Namespace != "" {
		return nil, fmt.Errorf("failed to get imagedata: getImageData is not served to a namespaced policy (tally lends its registry credentials to no tenant)")
	}
	d, ok := s.e.req.Data.(cel.ImageData)
	if s.e.req.Registry != nil {
		d, ok = s.e.req.Registry, true
	}
	if !ok || d == nil {
		return nil, fmt.Errorf("failed to get imagedata: no image data: tally reads registries in a cluster, or images of a context file")
	}
	var secrets []string
	insecure := false
	if c := s.ip.credentials; c != nil {
		insecure, secrets = c.AllowInsecureRegistry, c.Secrets
	}
	md, err := d.ImageMetadata(ctx, image, secrets, insecure)
	if err != nil {
		return nil, fmt.Errorf("failed to get imagedata: %w", err)
	}
	return md, nil
}
