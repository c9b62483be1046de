package kind

import (
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
)

// CheckRestricted evaluates the pod template of every Deployment among objs
// against the restricted Pod Security Standard (latest version), with the
// checks of k8s.io/pod-security-admission, and returns one error per
// violation, naming the Deployment and the check.
func CheckRestricted(objs []*unstructured.Unstructured) []error {
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		return []error{err}
	}
	lv := psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}
	var errs []error
	for _, o := range objs {
		if o.GroupVersionKind() != appsv1.SchemeGroupVersion.WithKind("Deployment") {
			continue
		}
		var d appsv1.Deployment
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", Describe(o), err))
			continue
		}
		for _, r := range eval.EvaluatePod(lv, &d.Spec.Template.ObjectMeta, &d.Spec.Template.Spec) {
			if !r.Allowed {
				errs = append(errs, fmt.Errorf("%s violates the restricted Pod Security Standard: %s: %s", Describe(o), r.ForbiddenReason, r.ForbiddenDetail))
			}
		}
	}
	return errs
}

// WriteGrant is a write permission tally is allowed to hold.
type WriteGrant struct {
	Group, Resource string
	// Verbs are the write verbs allowed.
	Verbs []string
	// RoleOnly: only a Role in tally's namespace may grant it, never a
	// ClusterRole.
	RoleOnly bool
	// Names, when set: every verb but create (which RBAC cannot limit by
	// name) must be limited to these resourceNames.
	Names []string
}

var allWrite = []string{"create", "update", "patch", "delete"}

// AllowedWrites is the whole of what tally may write: its report kinds,
// the status of policies (their Ready condition), Events, and named objects of its own (Leases, the scan-state ConfigMap, the
// webhook's Secret and configuration).
var AllowedWrites = []WriteGrant{
	{Group: "kyverno.io", Resource: "admissionreports", Verbs: allWrite},
	{Group: "kyverno.io", Resource: "clusteradmissionreports", Verbs: allWrite},
	// Kyverno's EphemeralReports are only deleted once folded, never written.
	{Group: "reports.kyverno.io", Resource: "ephemeralreports", Verbs: []string{"delete"}},
	{Group: "reports.kyverno.io", Resource: "clusterephemeralreports", Verbs: []string{"delete"}},
	{Group: "wgpolicyk8s.io", Resource: "policyreports", Verbs: allWrite},
	{Group: "wgpolicyk8s.io", Resource: "clusterpolicyreports", Verbs: allWrite},
	{Group: "openreports.io", Resource: "reports", Verbs: allWrite},
	{Group: "openreports.io", Resource: "clusterreports", Verbs: allWrite},
	{Group: "kyverno.io", Resource: "clusterpolicies/status", Verbs: []string{"patch"}},
	{Group: "kyverno.io", Resource: "policies/status", Verbs: []string{"patch"}},
	{Group: "policies.kyverno.io", Resource: "validatingpolicies/status", Verbs: []string{"patch"}},
	{Group: "policies.kyverno.io", Resource: "namespacedvalidatingpolicies/status", Verbs: []string{"patch"}},
	{Group: "policies.kyverno.io", Resource: "mutatingpolicies/status", Verbs: []string{"patch"}},
	{Group: "policies.kyverno.io", Resource: "namespacedmutatingpolicies/status", Verbs: []string{"patch"}},
	{Group: "policies.kyverno.io", Resource: "imagevalidatingpolicies/status", Verbs: []string{"patch"}},
	{Group: "policies.kyverno.io", Resource: "namespacedimagevalidatingpolicies/status", Verbs: []string{"patch"}},
	{Group: "", Resource: "events", Verbs: []string{"create", "patch"}},
	{Group: "events.k8s.io", Resource: "events", Verbs: []string{"create", "patch"}},
	// Each scanner replica's membership Lease is named after its Pod
	// (tally-member-<pod>), so Leases cannot be limited by name: only to
	// tally's namespace.
	{Group: "coordination.k8s.io", Resource: "leases", Verbs: []string{"create", "update", "patch", "delete"}, RoleOnly: true},
	{Group: "", Resource: "configmaps", Verbs: []string{"create", "update", "patch"}, RoleOnly: true, Names: []string{"tally-scan-state"}},
	{Group: "", Resource: "secrets", Verbs: []string{"create", "update", "patch"}, RoleOnly: true, Names: []string{"tally-webhook-tls"}},
	{Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations", Verbs: []string{"update", "patch"},
		Names: []string{WebhookConfig}},
	// A namespaced policy's cluster reads take the identity of its
	// namespace's ServiceAccount tally-tenant (issue 53): tally may
	// impersonate that one name, which has only what each namespace grants
	// it.
	{Group: "", Resource: "serviceaccounts", Verbs: []string{"impersonate"}, Names: []string{"tally-tenant"}},
}

// SecretReadNames are the only Secrets tally may read, in its namespace:
// the webhook's serving certificate, and the key the merger signs its
// reports with (R48).
var SecretReadNames = []string{"tally-webhook-tls", "tally-report-key"}

var readVerbs = []string{"get", "list", "watch"}

// CheckLeastPrivilege checks every Role and ClusterRole among objs: no
// wildcard, no non-resource URL, no write outside AllowedWrites (and within
// it, only the allowed verbs, names and role kind), no read of Secrets but
// the webhook's, and Roles only in tally's namespace. It returns one error
// per offending rule.
func CheckLeastPrivilege(objs []*unstructured.Unstructured) []error {
	var errs []error
	for _, o := range objs {
		if o.GroupVersionKind().Group != rbacv1.GroupName {
			continue
		}
		var rules []rbacv1.PolicyRule
		roleOnly := false
		switch o.GetKind() {
		case "Role":
			var r rbacv1.Role
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &r); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", Describe(o), err))
				continue
			}
			if r.Namespace != Namespace {
				errs = append(errs, fmt.Errorf("%s: Roles belong in %s", Describe(o), Namespace))
			}
			rules, roleOnly = r.Rules, true
		case "ClusterRole":
			var r rbacv1.ClusterRole
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &r); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", Describe(o), err))
				continue
			}
			if userRole(&r) {
				// Aggregated into admin, edit or view: users' rights, not
				// tally's. Never bound here, and only over namespaced
				// policies, exceptions and reports.
				errs = append(errs, checkUserRole(&r, objs)...)
				continue
			}
			rules = r.Rules
		default:
			continue
		}
		for i, rule := range rules {
			for _, err := range checkRule(rule, roleOnly) {
				errs = append(errs, fmt.Errorf("%s rule %d: %w", Describe(o), i, err))
			}
		}
	}
	return errs
}

// userRole says whether a ClusterRole is aggregated into Kubernetes'
// admin, edit or view roles.
func userRole(r *rbacv1.ClusterRole) bool {
	for _, k := range []string{"admin", "edit", "view"} {
		if r.Labels["rbac.authorization.k8s.io/aggregate-to-"+k] == "true" {
			return true
		}
	}
	return false
}

// userKinds are what the roles aggregated for users may cover.
var userKinds = map[string]bool{
	"kyverno.io/policies": true, "kyverno.io/policyexceptions": true,
	"policies.kyverno.io/namespacedvalidatingpolicies": true, "policies.kyverno.io/namespacedmutatingpolicies": true, "policies.kyverno.io/namespacedimagevalidatingpolicies": true, "policies.kyverno.io/policyexceptions": true,
	"wgpolicyk8s.io/policyreports": true, "openreports.io/reports": true,
}

// checkUserRole: a role aggregated for users binds to no one here and
// covers only namespaced policies, exceptions and reports, by name.
func checkUserRole(r *rbacv1.ClusterRole, objs []*unstructured.Unstructured) []error {
	var errs []error
	for _, o := range objs {
		if o.GetKind() != "ClusterRoleBinding" && o.GetKind() != "RoleBinding" {
			continue
		}
		if ref, _, _ := unstructured.NestedString(o.Object, "roleRef", "name"); ref == r.Name {
			errs = append(errs, fmt.Errorf("ClusterRole %s is for users (aggregated): %s binds it", r.Name, Describe(o)))
		}
	}
	for i, rule := range r.Rules {
		if len(rule.NonResourceURLs) > 0 {
			errs = append(errs, fmt.Errorf("ClusterRole %s rule %d: a non-resource URL", r.Name, i))
		}
		for _, g := range rule.APIGroups {
			for _, res := range rule.Resources {
				if !userKinds[g+"/"+res] {
					errs = append(errs, fmt.Errorf("ClusterRole %s rule %d: %s.%s is not a namespaced policy, exception or report", r.Name, i, res, g))
				}
			}
		}
	}
	return errs
}

func checkRule(rule rbacv1.PolicyRule, inRole bool) []error {
	var errs []error
	if len(rule.NonResourceURLs) > 0 {
		errs = append(errs, fmt.Errorf("grants non-resource URLs %v", rule.NonResourceURLs))
	}
	for _, list := range [][]string{rule.APIGroups, rule.Resources, rule.Verbs, rule.ResourceNames} {
		if slices.Contains(list, rbacv1.ResourceAll) {
			errs = append(errs, fmt.Errorf("uses a wildcard: apiGroups %q resources %q verbs %q", rule.APIGroups, rule.Resources, rule.Verbs))
			return errs
		}
	}
	for _, verb := range rule.Verbs {
		read := slices.Contains(readVerbs, verb)
		for _, g := range rule.APIGroups {
			for _, res := range rule.Resources {
				if read {
					if g == "" && res == "secrets" && (!inRole || len(rule.ResourceNames) == 0 || !subset(rule.ResourceNames, SecretReadNames)) {
						errs = append(errs, fmt.Errorf("%s secrets beyond %v in %s", verb, SecretReadNames, Namespace))
					}
					continue
				}
				if err := checkWrite(g, res, verb, rule.ResourceNames, inRole); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	return errs
}

func checkWrite(group, resource, verb string, names []string, inRole bool) error {
	what := fmt.Sprintf("%s %s.%s", verb, resource, group)
	if group == "" {
		what = fmt.Sprintf("%s %s", verb, resource)
	}
	for _, g := range AllowedWrites {
		if g.Group != group || g.Resource != resource {
			continue
		}
		switch {
		case !slices.Contains(g.Verbs, verb):
			return fmt.Errorf("%s: only %v are allowed", what, g.Verbs)
		case g.RoleOnly && !inRole:
			return fmt.Errorf("%s granted cluster-wide: only a Role in %s may grant it", what, Namespace)
		case len(g.Names) > 0 && verb != "create" && (len(names) == 0 || !subset(names, g.Names)):
			return fmt.Errorf("%s not limited to resourceNames %v (has %v)", what, g.Names, names)
		}
		return nil
	}
	return fmt.Errorf("%s: tally writes only its reports, Events, Leases and its own named objects", what)
}

func subset(a, b []string) bool {
	for _, s := range a {
		if !slices.Contains(b, s) {
			return false
		}
	}
	return true
}
