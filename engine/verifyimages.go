package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/engine/conditions"
	"github.com/tally-dev/tally/engine/imageverify"
	"github.com/tally-dev/tally/engine/variables"
	"github.com/tally-dev/tally/engine/wildcard"
)

// ImageVerifier verifies an image under a verifyImages entry (R41): the
// registry and cosign work, and its cache (R43). Without one (the CLI
// without --registry) verifyImages rules are skipped, and say why.
type ImageVerifier interface {
	Verify(ctx context.Context, c imageverify.Check) imageverify.Outcome
	// Resolve reads the digest of c.Image from its registry, with c's
	// credentials (c.Entry.ImageRegistryCredentials); the error of a
	// registry that does not answer is an error result's, never a fail's.
	Resolve(ctx context.Context, c imageverify.Check) (string, error)
}

// RegistryOffMessage is the skip of a verifyImages rule evaluated without
// registry access.
const RegistryOffMessage = "image verification skipped: registry access is off (tally --registry=false, tally-scanner --verify-images=false)"

// imagesRule is a compiled verifyImages rule.
type imagesRule struct {
	entries []imageverify.Verification
	// raw is the list as written, for variable substitution when hasVars.
	raw     any
	hasVars bool
	// identities tie cached verifications to each entry of the rule as
	// written (the policy's name goes before).
	identities []string
	// conditions are the decoded conditions of each entry's attestations.
	conditions [][]any
}

func (r *Rule) compileImages() error {
	raw := r.Raw.VerifyImages.Raw
	entries, err := imageverify.Parse(raw)
	if err != nil {
		return err
	}
	ir := &imagesRule{entries: entries}
	if err := json.Unmarshal(raw, &ir.raw); err != nil {
		return fmt.Errorf("verifyImages: %w", err)
	}
	// The attestations' conditions read each statement's predicate: their
	// variables are substituted then, not with the rule's.
	withoutConditions(ir.raw)
	ir.hasVars = variables.HasVariables(ir.raw)
	sum := sha256.Sum256(raw)
	for i := range entries {
		ir.identities = append(ir.identities, fmt.Sprintf("/%s/%s/%d", r.Name, hex.EncodeToString(sum[:8]), i))
	}
	for _, e := range entries {
		var conds []any
		for i, a := range e.Attestations {
			var c any
			if len(a.Conditions) > 0 {
				if err := json.Unmarshal(a.Conditions, &c); err != nil {
					return fmt.Errorf("verifyImages attestations[%d].conditions: %w", i, err)
				}
			}
			conds = append(conds, c)
		}
		ir.conditions = append(ir.conditions, conds)
	}
	r.images = ir
	return r.checkVariables()
}

// withoutConditions drops the conditions of the attestations of a raw
// verifyImages list.
func withoutConditions(list any) {
	entries, _ := list.([]any)
	for _, e := range entries {
		em, _ := e.(map[string]any)
		atts, _ := em["attestations"].([]any)
		for _, a := range atts {
			if am, ok := a.(map[string]any); ok {
				delete(am, "conditions")
			}
		}
	}
}

// containerImages are the images of the subject's pod spec, containers,
// then init containers, then ephemeral containers.
func containerImages(obj map[string]any) []string {
	spec := podSpecOf(obj)
	var out []string
	for _, list := range [...]string{"initContainers", "containers", "ephemeralContainers"} {
		for _, image := range listImages(spec, list) {
			if image != "" {
				out = append(out, image)
			}
		}
	}
	return out
}

// listImages are the images of one container list of a pod spec, as
// written.
func listImages(spec map[string]any, list string) []string {
	cs, _ := spec[list].([]any)
	var out []string
	for _, c := range cs {
		cm, _ := c.(map[string]any)
		if image, ok := cm["image"].(string); ok {
			out = append(out, image)
		}
	}
	return out
}

// pullSecrets are the names of the imagePullSecrets of obj's pod spec.
func pullSecrets(obj map[string]any) []string {
	refs, _ := podSpecOf(obj)["imagePullSecrets"].([]any)
	var out []string
	for _, r := range refs {
		rm, _ := r.(map[string]any)
		if n, _ := rm["name"].(string); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// imageString prints an image as Kyverno's results do: the registry
// (docker.io when none is given) and path, then the digest, else the tag.
func imageString(image string) string {
	p := parseImage(image)
	s := p["registry"].(string) + "/" + p["path"].(string)
	if d, ok := p["digest"].(string); ok && d != "" {
		return s + "@" + d
	}
	return s + ":" + p["tag"].(string)
}

// checkImages verifies every image of the subject that an entry of the
// rule selects. Kyverno reports one result per image; a report keeps one
// result per rule, so tally reports the worst (fail, then error, then
// pass, then skip), with its message (docs/known-differences.md).
func (e *evaluation) checkImages(rule *Rule, data map[string]any) RuleResult {
	ir := rule.images
	entries := ir.entries
	if ir.hasVars {
		sub, err := variables.Substitute(ir.raw, data)
		if err != nil {
			return e.result(rule, Error, "failed to substitute variables: "+causeOf(err).Error())
		}
		b, _ := json.Marshal(sub)
		if entries, err = imageverify.Parse(b); err != nil {
			return e.result(rule, Error, "failed to substitute variables: "+err.Error())
		}
	}
	images := containerImages(e.obj)
	// On an UPDATE, Kyverno verifies only the images that changed.
	var unchanged map[string]bool
	if e.req.operation() == OpUpdate && e.req.OldObject != nil {
		unchanged = map[string]bool{}
		for _, image := range containerImages(e.req.OldObject) {
			unchanged[image] = true
		}
	}
	var worst *RuleResult
	keep := func(r RuleResult) {
		if worst == nil || rank(r.Result) > rank(worst.Result) {
			worst = &r
		}
	}
	// The rule's images are those some entry selects (Kyverno's
	// ExtractMatchingImages); an image of the rule that an entry does not
	// select is that entry's skip, as Kyverno's verifyImage gives it.
	ruleImages := map[string]bool{}
	for i := range entries {
		for _, raw := range images {
			if wildcard.Any(entries[i].ImageReferences, imageString(raw)) {
				ruleImages[raw] = true
			}
		}
	}
	for i := range entries {
		entry := &entries[i]
		for _, raw := range images {
			if unchanged[raw] || !ruleImages[raw] {
				continue
			}
			image := imageString(raw)
			if len(entry.Attestors) == 0 && len(entry.Attestations) == 0 {
				continue // nothing to verify: Kyverno reports no result for the image
			}
			if !wildcard.Any(entry.ImageReferences, image) {
				keep(e.result(rule, Skip, fmt.Sprintf("skipping image reference image %s, policy %s ruleName %s", image, e.policy.Name, rule.Name)))
				continue
			}
			if wildcard.Any(entry.SkipImageReferences, image) {
				keep(e.result(rule, Skip, fmt.Sprintf("skipping image reference image %s, policy %s ruleName %s", image, e.policy.Name, rule.Name)))
				continue
			}
			if e.req.Images == nil {
				keep(e.result(rule, Skip, RegistryOffMessage))
				continue
			}
			if len(entry.Validate) > 0 && string(entry.Validate) != "null" {
				// Never a silent pass of what was not evaluated (R46).
				keep(e.result(rule, Error, fmt.Sprintf("failed to verify image %s: validate in a verifyImages entry is not evaluated by tally (docs/known-differences.md)", image)))
				continue
			}
			if e.policy.Namespace != "" {
				if why := tenantRefusal(entry, e.policy.Namespace); why != "" {
					keep(e.result(rule, Error, fmt.Sprintf("failed to verify image %s: %s", image, why)))
					continue
				}
			}
			check := imageverify.Check{
				Image:       image,
				Policy:      e.policy.Name,
				Tenant:      e.policy.Namespace != "",
				NameDigest:  entry.VerifyDigest != nil && *entry.VerifyDigest,
				Identity:    e.policy.Name + ir.identities[i],
				Entry:       entry,
				Namespace:   e.res.Namespace,
				PullSecrets: pullSecrets(e.obj),
			}
			if len(entry.Attestations) > 0 {
				check.Conditions = e.attestationConditions(rule, i, entry, data)
			}
			o := e.req.Images.Verify(e.ctx, check)
			keep(e.result(rule, outcomeResult(o.Result), o.Message))
		}
	}
	if worst == nil {
		// No image of the resource is selected (or every selected one is
		// unchanged): Kyverno's handler is not even made, and the rule
		// has no result (mutate_image.go: no matching images).
		return RuleResult{}
	}
	return *worst
}

// tenantRefusal says what a namespaced Policy's entry (of namespace ns)
// asks that tally does not do for a tenant: read Secrets (of tally's
// namespace) for registry credentials, read a key from a Secret of another
// namespace, or call a transparency log of the policy's choosing. Empty
// when nothing.
func tenantRefusal(e *imageverify.Verification, ns string) string {
	if rc := e.ImageRegistryCredentials; rc != nil && len(rc.Secrets) > 0 {
		return "imageRegistryCredentials.secrets are not read for a namespaced Policy (tally lends its credentials to no tenant)"
	}
	var sets []imageverify.AttestorSet
	sets = append(sets, e.Attestors...)
	for _, a := range e.Attestations {
		sets = append(sets, a.Attestors...)
	}
	for _, s := range sets {
		for _, a := range s.Entries {
			if r := rekorOf(a); r != nil && r.URL != "" {
				return "rekor.url is not called for a namespaced Policy (tally calls no service a tenant names)"
			}
			if k := a.Keys; k != nil && k.Secret != nil && k.Secret.Namespace != ns {
				return "keys.secret of another namespace is not read for a namespaced Policy (R47)"
			}
		}
	}
	return ""
}

func rekorOf(a imageverify.Attestor) *imageverify.Rekor {
	switch {
	case a.Keys != nil:
		return a.Keys.Rekor
	case a.Certificates != nil:
		return a.Certificates.Rekor
	case a.Keyless != nil:
		return a.Keyless.Rekor
	}
	return nil
}

// attestationConditions checks the conditions of entry's attestation i
// on a statement: its predicate's fields are the conditions' variables,
// beside the rule's data.
func (e *evaluation) attestationConditions(rule *Rule, idx int, entry *imageverify.Verification, data map[string]any) func(int, map[string]any) error {
	conds := rule.images.conditions[idx]
	return func(i int, statement map[string]any) error {
		if i >= len(conds) || conds[i] == nil {
			return nil
		}
		d := cloneTop(data)
		if p, ok := statement["predicate"].(map[string]any); ok {
			for k, v := range p {
				d[k] = v
			}
		}
		ok, msg, err := conditions.AnyAll(conds[i], d, conditions.Preconditions)
		if err != nil {
			return fmt.Errorf("failed to evaluate the attestation conditions: %w", causeOf(err))
		}
		if !ok {
			typ := entry.Attestations[i].Type
			if typ == "" {
				typ = entry.Attestations[i].PredicateType
			}
			if msg != "" {
				return fmt.Errorf("attestation checks failed for predicate %s: %s", typ, msg)
			}
			return fmt.Errorf("attestation checks failed for predicate %s", typ)
		}
		return nil
	}
}

func outcomeResult(r string) wgv1alpha2.Result {
	switch r {
	case "pass":
		return Pass
	case "fail":
		return Fail
	}
	return Error
}

// rank orders results for the one a rule reports of several images.
func rank(r wgv1alpha2.Result) int {
	switch r {
	case Fail, Warn:
		return 4
	case Error:
		return 3
	case Pass:
		return 2
	}
	return 1
}
