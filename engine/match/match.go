package match

import (
	"fmt"
	"slices"
	"strings"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// OperationCreate is the operation a background scan evaluates as.
const OperationCreate = "CREATE"

// Resource is what matching needs to know about a resource.
type Resource struct {
	// Group, Version and Kind of the resource ("", "v1", "Pod"; "apps", "v1",
	// "Deployment"). For a subresource request they are those of the parent
	// resource (Pod for pods/exec), and Subresource names the subresource.
	Group, Version, Kind string
	// Subresource is "" for the resource itself, or e.g. "status", "exec", "scale".
	Subresource string
	// ObjectGroup, ObjectVersion and ObjectKind are, for a subresource whose
	// object has a kind of its own (autoscaling/v1 Scale for
	// deployments/scale), that kind: a selector of it without subresource
	// ("Scale") selects the request too, as in Kyverno. Empty otherwise.
	ObjectGroup, ObjectVersion, ObjectKind string
	Name                                   string
	// GenerateName stands in for Name in name filters while Name is empty
	// (a CREATE request of an object named by the API server).
	GenerateName string
	// Namespace is "" for cluster-scoped resources.
	Namespace           string
	Labels, Annotations map[string]string
}

// isNamespace reports whether the resource is a core Namespace, whose
// namespace for the namespaces filter is its own name.
func (r *Resource) isNamespace() bool { return r.Kind == "Namespace" && r.Group == "" }

// Admission is request data only present at admission; nil in background scans.
type Admission struct {
	// Operation is CREATE, UPDATE, DELETE or CONNECT; "" means CREATE.
	Operation string
	Username  string
	Groups    []string
	// Roles are "namespace:name" of the Roles bound to the user; ClusterRoles
	// the names of the bound ClusterRoles.
	Roles, ClusterRoles []string
}

// hasUser reports whether the request carries any user information.
func (a *Admission) hasUser() bool {
	return a != nil && (a.Username != "" || len(a.Groups) > 0 || len(a.Roles) > 0 || len(a.ClusterRoles) > 0)
}

func (a *Admission) operation() string {
	if a == nil || a.Operation == "" {
		return OperationCreate
	}
	return a.Operation
}

// Matches reports whether a rule's match holds and its exclude does not. nsLabels
// are the labels of the resource's namespace (nil if unknown or cluster-scoped).
// adm is nil in background scans, which evaluate as a CREATE without user
// information (see the package documentation for what that means for user
// criteria). The error reports a malformed match or exclude (bad kind or label
// selector). Matches compiles the criteria at every call: use Compile where
// the same rule is matched repeatedly.
func Matches(match kyvernov1.MatchResources, exclude *kyvernov1.MatchResources, res Resource, nsLabels map[string]string, adm *Admission) (bool, error) {
	m, err := Compile(match, exclude)
	if err != nil {
		return false, err
	}
	return m.Matches(&res, nsLabels, adm), nil
}

// InPolicyNamespace reports whether a policy of the given namespace can apply
// to the resource: a ClusterPolicy (policyNamespace "") applies everywhere, a
// namespaced Policy only to resources of its own namespace (never to
// cluster-scoped ones, Namespaces included).
func InPolicyNamespace(policyNamespace string, res Resource) bool {
	return policyNamespace == "" || policyNamespace == res.Namespace
}

// Matcher is the compiled match and exclude of a rule. It is immutable and
// safe for concurrent use; matching does not allocate.
type Matcher struct {
	match, exclude group
	kinds          []string
	nsLabels       bool
}

// Compile compiles a rule's match and optional exclude.
func Compile(match kyvernov1.MatchResources, exclude *kyvernov1.MatchResources) (*Matcher, error) {
	m := &Matcher{kinds: Kinds(match)}
	var err error
	if m.match, err = compileGroup(match, "match"); err != nil {
		return nil, err
	}
	if exclude != nil {
		if m.exclude, err = compileGroup(*exclude, "exclude"); err != nil {
			return nil, err
		}
	}
	m.nsLabels = m.match.usesNamespaceLabels() || m.exclude.usesNamespaceLabels()
	return m, nil
}

// Matches reports whether the match holds for the resource and the exclude
// does not; see the package function Matches for the arguments.
func (m *Matcher) Matches(res *Resource, nsLabels map[string]string, adm *Admission) bool {
	req := request{op: adm.operation(), adm: adm, user: adm.hasUser()}
	if !m.match.matches(res, nsLabels, &req, false) {
		return false
	}
	return m.exclude.mode == modeNone || !m.exclude.matches(res, nsLabels, &req, true)
}

// Kinds returns the kinds the match can select, as Kinds does.
func (m *Matcher) Kinds() []string { return slices.Clone(m.kinds) }

// UsesNamespaceLabels reports whether the result depends on the labels of
// the resource's namespace (a namespaceSelector in match or exclude), so that
// a change of those labels calls for matching again.
func (m *Matcher) UsesNamespaceLabels() bool { return m.nsLabels }

// Kinds returns the kinds (as written, wildcards kept) a rule's match can
// select, without duplicates, for informer discovery and indexing. A filter
// of `any` (or the legacy inline filter) without kinds selects every kind and
// contributes "*"; under `all` every filter must hold, so "*" is returned only
// when no filter names a kind. The result over-approximates: under `all` it is
// the union of the filters' kinds, not their intersection.
func Kinds(match kyvernov1.MatchResources) []string {
	var out []string
	add := func(kinds []string) {
		if len(kinds) == 0 {
			kinds = []string{"*"}
		}
		for _, k := range kinds {
			if !slices.Contains(out, k) {
				out = append(out, k)
			}
		}
	}
	switch {
	case len(match.Any) > 0:
		for i := range match.Any {
			add(match.Any[i].Resources.Kinds)
		}
	case len(match.All) > 0:
		for i := range match.All {
			if len(match.All[i].Resources.Kinds) > 0 {
				add(match.All[i].Resources.Kinds)
			}
		}
		if len(out) == 0 {
			add(nil)
		}
	default:
		add(match.Resources.Kinds)
	}
	return out
}

type mode uint8

const (
	modeNone   mode = iota // no exclude
	modeAny                // one filter suffices
	modeAll                // every filter must hold
	modeInline             // the legacy single filter inline in match/exclude
)

type group struct {
	mode    mode
	filters []filter
}

func compileGroup(mr kyvernov1.MatchResources, path string) (group, error) {
	var g group
	var src []kyvernov1.ResourceFilter
	// As Kyverno: any wins over all, which wins over the inline filter
	// (policy validation rejects more than one of them).
	switch {
	case len(mr.Any) > 0:
		g.mode, src, path = modeAny, mr.Any, path+".any"
	case len(mr.All) > 0:
		g.mode, src, path = modeAll, mr.All, path+".all"
	default:
		g.mode, src = modeInline, []kyvernov1.ResourceFilter{{UserInfo: mr.UserInfo, Resources: mr.Resources}}
	}
	g.filters = make([]filter, len(src))
	for i := range src {
		p := path
		if g.mode != modeInline {
			p = fmt.Sprintf("%s[%d]", path, i)
		}
		if err := g.filters[i].compile(&src[i], p); err != nil {
			return group{}, err
		}
	}
	return g, nil
}

func (g *group) usesNamespaceLabels() bool {
	for i := range g.filters {
		if g.filters[i].nsSelector != nil {
			return true
		}
	}
	return false
}

// matches evaluates the group: for a match group whether it selects the
// resource, for an exclude group whether it excludes it.
func (g *group) matches(res *Resource, nsLabels map[string]string, req *request, exclude bool) bool {
	switch g.mode {
	case modeAny:
		for i := range g.filters {
			if g.filters[i].matches(res, nsLabels, req, exclude) {
				return true
			}
		}
		return false
	case modeAll, modeInline:
		for i := range g.filters {
			if !g.filters[i].matches(res, nsLabels, req, exclude) {
				return false
			}
		}
		return len(g.filters) > 0
	}
	return false
}

// request is the per-call view of the admission data.
type request struct {
	op   string
	adm  *Admission
	user bool // the request carries user information
}

// filter is a compiled ResourceFilter: every criterion it sets must hold.
type filter struct {
	noResource bool // no resource criterion is set
	noUser     bool // no user criterion is set

	kinds       []KindSelector
	name        string // deprecated single name; "" when unset
	names       []string
	namespaces  []string
	annotations []pair
	selector    *selector
	nsSelector  *selector
	operations  []string

	roles, clusterRoles []string
	subjects            []rbacv1.Subject
}

func (f *filter) compile(src *kyvernov1.ResourceFilter, path string) error {
	rd := &src.Resources
	f.noResource = rd.IsEmpty()
	f.noUser = src.UserInfo.IsEmpty()
	for _, s := range rd.Kinds {
		k, err := ParseKind(s)
		if err != nil {
			return fmt.Errorf("%s.resources.kinds: %w", path, err)
		}
		f.kinds = append(f.kinds, k)
	}
	// Copies, so that the Matcher does not change with the policy it came from.
	f.name, f.names, f.namespaces = rd.Name, slices.Clone(rd.Names), slices.Clone(rd.Namespaces)
	for k, v := range rd.Annotations {
		f.annotations = append(f.annotations, newPair(k, v))
	}
	slices.SortFunc(f.annotations, func(a, b pair) int { return strings.Compare(a.key, b.key) })
	var err error
	if rd.Selector != nil {
		if f.selector, err = compileSelector(rd.Selector); err != nil {
			return fmt.Errorf("%s.resources.selector: %w", path, err)
		}
	}
	if rd.NamespaceSelector != nil {
		if f.nsSelector, err = compileSelector(rd.NamespaceSelector); err != nil {
			return fmt.Errorf("%s.resources.namespaceSelector: %w", path, err)
		}
	}
	for _, op := range rd.Operations {
		f.operations = append(f.operations, string(op))
	}
	f.roles, f.clusterRoles, f.subjects = slices.Clone(src.Roles), slices.Clone(src.ClusterRoles), slices.Clone(src.Subjects)
	return nil
}

// matches reports whether every criterion of the filter holds. A filter that
// sets nothing holds for nothing: an empty match filter selects nothing and an
// empty exclude filter excludes nothing.
//
// User criteria (roles, clusterRoles, subjects) need the request's user. When
// the request carries none (background scans, or a request without user
// information), a match filter ignores them, so that only its resource
// criteria count (a filter left with none then selects nothing), while an
// exclude filter that sets them does not hold: nothing is excluded for a user
// that is not known.
func (f *filter) matches(res *Resource, nsLabels map[string]string, req *request, exclude bool) bool {
	checkUser := !f.noUser && (req.user || exclude)
	if f.noResource && !checkUser {
		return false
	}
	if len(f.kinds) > 0 && !f.matchKinds(res) {
		return false
	}
	if len(f.operations) > 0 && !slices.Contains(f.operations, req.op) {
		return false
	}
	if f.name != "" || len(f.names) > 0 {
		name := res.Name
		if name == "" {
			name = res.GenerateName
		}
		if f.name != "" && !wildcardMatch(f.name, name) {
			return false
		}
		if len(f.names) > 0 && !wildcardAny(f.names, name) {
			return false
		}
	}
	if len(f.namespaces) > 0 {
		ns := res.Namespace
		if res.isNamespace() {
			ns = res.Name
		}
		if !wildcardAny(f.namespaces, ns) {
			return false
		}
	}
	for _, a := range f.annotations {
		if !anyEntryMatches(a, res.Annotations) {
			return false
		}
	}
	if f.selector != nil && !f.selector.matches(res.Labels) {
		return false
	}
	if f.nsSelector != nil && (res.isNamespace() || !f.nsSelector.matches(nsLabels)) {
		return false
	}
	if checkUser {
		return req.user && f.matchUser(req.adm)
	}
	return true
}

func (f *filter) matchKinds(res *Resource) bool {
	for i := range f.kinds {
		if f.kinds[i].Matches(res.Group, res.Version, res.Kind, res.Subresource) {
			return true
		}
		if res.ObjectKind != "" && f.kinds[i].Matches(res.ObjectGroup, res.ObjectVersion, res.ObjectKind, "") {
			return true
		}
	}
	return false
}

// matchUser checks the user criteria: each list that is set must have one
// entry that the request satisfies.
func (f *filter) matchUser(adm *Admission) bool {
	if len(f.roles) > 0 && !containsAny(adm.Roles, f.roles) {
		return false
	}
	if len(f.clusterRoles) > 0 && !containsAny(adm.ClusterRoles, f.clusterRoles) {
		return false
	}
	if len(f.subjects) > 0 && !matchSubjects(f.subjects, adm) {
		return false
	}
	return true
}

func containsAny(have, want []string) bool {
	for _, w := range want {
		if slices.Contains(have, w) {
			return true
		}
	}
	return false
}

const serviceAccountPrefix = "system:serviceaccount:"

// matchSubjects reports whether one of the subjects is the requesting user:
// a User by username, a Group by one of the user's groups, a ServiceAccount
// by the "system:serviceaccount:<namespace>:<name>" username. Names and
// namespaces accept wildcards.
func matchSubjects(subjects []rbacv1.Subject, adm *Admission) bool {
	for i := range subjects {
		s := &subjects[i]
		switch s.Kind {
		case rbacv1.UserKind:
			if wildcardMatch(s.Name, adm.Username) {
				return true
			}
		case rbacv1.GroupKind:
			if anyValueMatches(s.Name, adm.Groups) {
				return true
			}
		case rbacv1.ServiceAccountKind:
			rest, ok := strings.CutPrefix(adm.Username, serviceAccountPrefix)
			if !ok {
				continue
			}
			ns, name, ok := strings.Cut(rest, ":")
			if ok && wildcardMatch(s.Namespace, ns) && wildcardMatch(s.Name, name) {
				return true
			}
		}
	}
	return false
}

// anyValueMatches reports whether one of values matches pattern.
func anyValueMatches(pattern string, values []string) bool {
	for _, v := range values {
		if wildcardMatch(pattern, v) {
			return true
		}
	}
	return false
}
