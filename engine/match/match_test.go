package match

import (
	"slices"
	"strings"
	"testing"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	"sigs.k8s.io/yaml"
)

// mr parses a match or exclude block written in YAML.
func mr(t testing.TB, s string) kyvernov1.MatchResources {
	t.Helper()
	var m kyvernov1.MatchResources
	if err := yaml.UnmarshalStrict([]byte(s), &m); err != nil {
		t.Fatalf("bad match %q: %v", s, err)
	}
	return m
}

var (
	pod = Resource{Version: "v1", Kind: "Pod", Name: "web-1", Namespace: "prod",
		Labels:      map[string]string{"app": "web", "protected": "label-test"},
		Annotations: map[string]string{"team": "blue", "imageregistry": "https://hub.docker.com/"}}
	deployment  = Resource{Group: "apps", Version: "v1", Kind: "Deployment", Name: "web", Namespace: "prod"}
	namespace   = Resource{Version: "v1", Kind: "Namespace", Name: "prod", Labels: map[string]string{"env": "prod"}}
	clusterRole = Resource{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole", Name: "admin"}
)

func with(r Resource, f func(*Resource)) Resource {
	f(&r)
	return r
}

func TestMatches(t *testing.T) {
	prodLabels := map[string]string{"env": "prod", "foo.com/managed-state": "managed"}
	dave := &Admission{Operation: "CREATE", Username: "dave", Groups: []string{"devs", "system:authenticated"},
		Roles: []string{"prod:editor"}, ClusterRoles: []string{"view"}}
	admin := &Admission{Operation: "CREATE", Username: "root", ClusterRoles: []string{"cluster-admin"}}
	sa := &Admission{Operation: "CREATE", Username: "system:serviceaccount:kube-system:replicaset-controller"}
	tests := map[string]struct {
		match    string
		exclude  string
		res      Resource
		nsLabels map[string]string
		adm      *Admission
		want     bool
	}{
		// kinds
		"a kind selects that kind":                      {match: `any: [{resources: {kinds: [Pod]}}]`, res: pod, want: true},
		"a kind does not select another kind":           {match: `any: [{resources: {kinds: [Pod]}}]`, res: deployment},
		"a kind selects it in any group":                {match: `any: [{resources: {kinds: [Deployment]}}]`, res: deployment, want: true},
		"kinds are an OR":                               {match: `any: [{resources: {kinds: [Service, Pod]}}]`, res: pod, want: true},
		"kind matching is case-sensitive":               {match: `any: [{resources: {kinds: [pod]}}]`, res: pod},
		"version/kind selects that version":             {match: `any: [{resources: {kinds: [v1/Pod]}}]`, res: pod, want: true},
		"version/kind rejects another version":          {match: `any: [{resources: {kinds: [v2/Pod]}}]`, res: pod},
		"group/version/kind selects that group":         {match: `any: [{resources: {kinds: [apps/v1/Deployment]}}]`, res: deployment, want: true},
		"group/version/kind rejects another group":      {match: `any: [{resources: {kinds: [extensions/v1beta1/Deployment]}}]`, res: deployment},
		"group/*/kind selects every version":            {match: `any: [{resources: {kinds: ["apps/*/Deployment"]}}]`, res: deployment, want: true},
		"group/*/* selects every kind of the group":     {match: `any: [{resources: {kinds: ["apps/*/*"]}}]`, res: deployment, want: true},
		"group/*/* rejects other groups":                {match: `any: [{resources: {kinds: ["apps/*/*"]}}]`, res: pod},
		"*/kind selects every version":                  {match: `any: [{resources: {kinds: ["*/Pod"]}}]`, res: pod, want: true},
		"* selects every kind":                          {match: `any: [{resources: {kinds: ["*"]}}]`, res: clusterRole, want: true},
		"* selects no subresource":                      {match: `any: [{resources: {kinds: ["*"]}}]`, res: with(pod, func(r *Resource) { r.Subresource = "status" })},
		"*/* selects subresources":                      {match: `any: [{resources: {kinds: ["*/*"]}}]`, res: with(pod, func(r *Resource) { r.Subresource = "status" }), want: true},
		"kind/subresource selects the subresource":      {match: `any: [{resources: {kinds: [Pod/status]}}]`, res: with(pod, func(r *Resource) { r.Subresource = "status" }), want: true},
		"kind/subresource does not select the resource": {match: `any: [{resources: {kinds: [Pod/status]}}]`, res: pod},
		"kind.subresource selects the subresource":      {match: `any: [{resources: {kinds: [v1/Pod.exec]}}]`, res: with(pod, func(r *Resource) { r.Subresource = "exec" }), want: true},
		"group/version/kind/subresource":                {match: `any: [{resources: {kinds: [apps/v1/Deployment/scale]}}]`, res: with(deployment, func(r *Resource) { r.Subresource = "scale" }), want: true},
		"a kind does not select its subresources":       {match: `any: [{resources: {kinds: [Pod]}}]`, res: with(pod, func(r *Resource) { r.Subresource = "exec" })},
		"a subresource object's own kind selects it": {match: `any: [{resources: {kinds: [Scale]}}]`, res: with(deployment, func(r *Resource) {
			r.Subresource, r.ObjectGroup, r.ObjectVersion, r.ObjectKind = "scale", "autoscaling", "v1", "Scale"
		}), want: true},
		"a subresource object's own kind with its version selects it": {match: `any: [{resources: {kinds: [autoscaling/v1/Scale]}}]`, res: with(deployment, func(r *Resource) {
			r.Subresource, r.ObjectGroup, r.ObjectVersion, r.ObjectKind = "scale", "autoscaling", "v1", "Scale"
		}), want: true},
		"another kind does not select a subresource object": {match: `any: [{resources: {kinds: [Deployment]}}]`, res: with(deployment, func(r *Resource) {
			r.Subresource, r.ObjectGroup, r.ObjectVersion, r.ObjectKind = "scale", "autoscaling", "v1", "Scale"
		})},

		"Pod selects the ephemeralcontainers subresource":  {match: `any: [{resources: {kinds: [Pod]}}]`, res: with(pod, func(r *Resource) { r.Subresource = "ephemeralcontainers" }), want: true},
		"kind/* selects the resource and its subresources": {match: `any: [{resources: {kinds: ["Pod/*"]}}]`, res: with(pod, func(r *Resource) { r.Subresource = "log" }), want: true},

		// names
		"names accept a * wildcard":              {match: `any: [{resources: {kinds: [Pod], names: ["web-*"]}}]`, res: pod, want: true},
		"names accept a ? wildcard":              {match: `any: [{resources: {kinds: [Pod], names: ["web-?"]}}]`, res: pod, want: true},
		"names are an OR":                        {match: `any: [{resources: {kinds: [Pod], names: [db, "web-1"]}}]`, res: pod, want: true},
		"names reject other names":               {match: `any: [{resources: {kinds: [Pod], names: ["db-*"]}}]`, res: pod},
		"the deprecated name still works":        {match: `any: [{resources: {kinds: [Pod], name: "web*"}}]`, res: pod, want: true},
		"name and names must both hold":          {match: `any: [{resources: {kinds: [Pod], name: "web*", names: [db]}}]`, res: pod},
		"an unnamed resource uses generateName":  {match: `any: [{resources: {kinds: [Pod], names: ["web-*"]}}]`, res: with(pod, func(r *Resource) { r.Name, r.GenerateName = "", "web-" }), want: true},
		"a single ? does not match two runes":    {match: `any: [{resources: {kinds: [Pod], names: ["web?"]}}]`, res: pod},
		"a ? matches one multi-byte rune":        {match: `any: [{resources: {kinds: [Pod], names: ["caf?"]}}]`, res: with(pod, func(r *Resource) { r.Name = "café" }), want: true},
		"the legacy inline filter selects names": {match: `resources: {kinds: [Pod], names: ["web-1"]}`, res: pod, want: true},

		// namespaces
		"namespaces select by namespace":                  {match: `any: [{resources: {kinds: [Pod], namespaces: [dev, prod]}}]`, res: pod, want: true},
		"namespaces accept wildcards":                     {match: `any: [{resources: {kinds: [Pod], namespaces: ["pr?d*"]}}]`, res: pod, want: true},
		"namespaces reject other namespaces":              {match: `any: [{resources: {kinds: [Pod], namespaces: [dev]}}]`, res: pod},
		"a Namespace is in the namespace of its name":     {match: `any: [{resources: {kinds: [Namespace], namespaces: [prod]}}]`, res: namespace, want: true},
		"a cluster-scoped resource is in no namespace":    {match: `any: [{resources: {kinds: [ClusterRole], namespaces: [prod]}}]`, res: clusterRole},
		"namespace * selects cluster-scoped resources":    {match: `any: [{resources: {kinds: [ClusterRole], namespaces: ["*"]}}]`, res: clusterRole, want: true},
		"kinds and namespaces must both hold":             {match: `any: [{resources: {kinds: [Deployment], namespaces: [prod]}}]`, res: pod},
		"annotations select on key and value":             {match: `any: [{resources: {kinds: [Pod], annotations: {imageregistry: "https://hub.docker.com/"}}}]`, res: pod, want: true},
		"annotations accept wildcards in keys and values": {match: `any: [{resources: {kinds: [Pod], annotations: {"image*": "https://*"}}}]`, res: pod, want: true},
		"every annotation must be present":                {match: `any: [{resources: {kinds: [Pod], annotations: {team: blue, tier: "*"}}}]`, res: pod},
		"an annotation value must match":                  {match: `any: [{resources: {kinds: [Pod], annotations: {team: red}}}]`, res: pod},

		// label selector
		"matchLabels select":                                 {match: `any: [{resources: {kinds: [Pod], selector: {matchLabels: {app: web}}}}]`, res: pod, want: true},
		"matchLabels reject other values":                    {match: `any: [{resources: {kinds: [Pod], selector: {matchLabels: {app: db}}}}]`, res: pod},
		"matchExpressions select":                            {match: `any: [{resources: {kinds: [Pod], selector: {matchExpressions: [{key: app, operator: In, values: [web, db]}]}}}]`, res: pod, want: true},
		"matchLabels and matchExpressions must both hold":    {match: `any: [{resources: {kinds: [Pod], selector: {matchLabels: {app: web}, matchExpressions: [{key: tier, operator: Exists}]}}}]`, res: pod},
		"an empty selector selects everything":               {match: `any: [{resources: {kinds: [Pod], selector: {}}}]`, res: pod, want: true},
		"a wildcard value * needs the label":                 {match: `any: [{resources: {kinds: [Pod], selector: {matchLabels: {protected: "*"}}}}]`, res: deployment},
		"a wildcard value * selects any value":               {match: `any: [{resources: {kinds: [Pod], selector: {matchLabels: {protected: "*"}}}}]`, res: pod, want: true},
		"a wildcard suffix selects":                          {match: `any: [{resources: {kinds: [Pod], selector: {matchLabels: {protected: "*-test"}}}}]`, res: pod, want: true},
		"a wildcard prefix rejects":                          {match: `any: [{resources: {kinds: [Pod], selector: {matchLabels: {protected: "test-*"}}}}]`, res: pod},
		"a wildcard key selects":                             {match: `any: [{resources: {kinds: [Pod], selector: {matchLabels: {"prot*": "label-?est"}}}}]`, res: pod, want: true},
		"wildcard and plain matchLabels must both hold":      {match: `any: [{resources: {kinds: [Pod], selector: {matchLabels: {"prot*": "*", app: db}}}}]`, res: pod},
		"a selector on a resource without labels rejects":    {match: `any: [{resources: {kinds: [Deployment], selector: {matchLabels: {app: web}}}}]`, res: deployment},
		"namespaceSelector selects on the namespace":         {match: `any: [{resources: {kinds: [Pod], namespaceSelector: {matchExpressions: [{key: foo.com/managed-state, operator: In, values: [managed]}]}}}]`, res: pod, nsLabels: prodLabels, want: true},
		"namespaceSelector rejects other namespaces":         {match: `any: [{resources: {kinds: [Pod], namespaceSelector: {matchLabels: {env: dev}}}}]`, res: pod, nsLabels: prodLabels},
		"namespaceSelector without namespace labels":         {match: `any: [{resources: {kinds: [Pod], namespaceSelector: {matchLabels: {env: prod}}}}]`, res: pod},
		"a NotIn namespaceSelector holds without labels":     {match: `any: [{resources: {kinds: [ClusterRole], namespaceSelector: {matchExpressions: [{key: env, operator: NotIn, values: [prod]}]}}}]`, res: clusterRole, want: true},
		"namespaceSelector never selects a Namespace":        {match: `any: [{resources: {kinds: [Namespace], namespaceSelector: {}}}]`, res: namespace, nsLabels: prodLabels},
		"namespaceSelector accepts wildcards in matchLabels": {match: `any: [{resources: {kinds: [Pod], namespaceSelector: {matchLabels: {env: "p*"}}}}]`, res: pod, nsLabels: prodLabels, want: true},

		// operations
		"a background scan is a CREATE":          {match: `any: [{resources: {kinds: [Pod], operations: [CREATE]}}]`, res: pod, want: true},
		"a background scan is no UPDATE":         {match: `any: [{resources: {kinds: [Pod], operations: [UPDATE]}}]`, res: pod},
		"operations select the request's":        {match: `any: [{resources: {kinds: [Pod], operations: [CREATE, UPDATE]}}]`, res: pod, adm: &Admission{Operation: "UPDATE"}, want: true},
		"operations reject other operations":     {match: `any: [{resources: {kinds: [Pod], operations: [DELETE]}}]`, res: pod, adm: &Admission{Operation: "UPDATE"}},
		"no operations select every operation":   {match: `any: [{resources: {kinds: [Pod]}}]`, res: pod, adm: &Admission{Operation: "DELETE"}, want: true},
		"an admission without operation creates": {match: `any: [{resources: {kinds: [Pod], operations: [CREATE]}}]`, res: pod, adm: &Admission{}, want: true},

		// any, all, inline, empty
		"any needs one filter":                       {match: `any: [{resources: {kinds: [Service]}}, {resources: {kinds: [Pod]}}]`, res: pod, want: true},
		"any rejects when no filter holds":           {match: `any: [{resources: {kinds: [Service]}}, {resources: {kinds: [Secret]}}]`, res: pod},
		"all needs every filter":                     {match: `all: [{resources: {kinds: [Pod]}}, {resources: {namespaces: [prod]}}]`, res: pod, want: true},
		"all rejects when one filter fails":          {match: `all: [{resources: {kinds: [Pod]}}, {resources: {namespaces: [dev]}}]`, res: pod},
		"any wins over all":                          {match: `{any: [{resources: {kinds: [Pod]}}], all: [{resources: {kinds: [Service]}}]}`, res: pod, want: true},
		"the legacy inline filter selects":           {match: `resources: {kinds: [Pod], namespaces: [prod]}`, res: pod, want: true},
		"an empty match selects nothing":             {match: `{}`, res: pod},
		"an empty filter selects nothing":            {match: `any: [{resources: {}}]`, res: pod},
		"an empty filter in all selects nothing":     {match: `all: [{resources: {kinds: [Pod]}}, {}]`, res: pod},
		"a filter holds only if all its fields hold": {match: `any: [{resources: {kinds: [Pod], names: ["web-*"], namespaces: [prod], selector: {matchLabels: {app: web}}, annotations: {team: blue}, operations: [CREATE]}}]`, res: pod, want: true},

		// exclude
		"exclude any removes a match":              {match: `any: [{resources: {kinds: [Pod]}}]`, exclude: `any: [{resources: {namespaces: [kube-system]}}, {resources: {namespaces: [prod]}}]`, res: pod},
		"exclude any keeps what no filter selects": {match: `any: [{resources: {kinds: [Pod]}}]`, exclude: `any: [{resources: {namespaces: [kube-system]}}]`, res: pod, want: true},
		"exclude all needs every filter":           {match: `any: [{resources: {kinds: [Pod]}}]`, exclude: `all: [{resources: {namespaces: [prod]}}, {resources: {names: [db]}}]`, res: pod, want: true},
		"exclude all removes when all hold":        {match: `any: [{resources: {kinds: [Pod]}}]`, exclude: `all: [{resources: {namespaces: [prod]}}, {resources: {names: ["web*"]}}]`, res: pod},
		"an empty exclude excludes nothing":        {match: `any: [{resources: {kinds: [Pod]}}]`, exclude: `{}`, res: pod, want: true},
		"an empty exclude filter excludes nothing": {match: `any: [{resources: {kinds: [Pod]}}]`, exclude: `any: [{resources: {}}]`, res: pod, want: true},
		"the legacy inline exclude removes":        {match: `resources: {kinds: [Pod]}`, exclude: `resources: {selector: {matchLabels: {app: web}}}`, res: pod},
		"exclude by annotation":                    {match: `any: [{resources: {kinds: [Pod]}}]`, exclude: `any: [{resources: {annotations: {team: blue}}}]`, res: pod},

		// user criteria
		"a background scan ignores match subjects":              {match: `any: [{resources: {kinds: [Pod]}, subjects: [{kind: User, name: dave}]}]`, res: pod, want: true},
		"a background scan ignores a filter with only subjects": {match: `any: [{subjects: [{kind: User, name: dave}]}]`, res: pod},
		"a request without user ignores match subjects":         {match: `any: [{resources: {kinds: [Pod]}, subjects: [{kind: User, name: dave}]}]`, res: pod, adm: &Admission{Operation: "UPDATE"}, want: true},
		"subjects select the user":                              {match: `any: [{resources: {kinds: [Pod]}, subjects: [{kind: User, name: dave}]}]`, res: pod, adm: dave, want: true},
		"subjects reject other users":                           {match: `any: [{resources: {kinds: [Pod]}, subjects: [{kind: User, name: mary}]}]`, res: pod, adm: dave},
		"a filter with only subjects selects the user":          {match: `any: [{subjects: [{kind: User, name: "da*"}]}]`, res: pod, adm: dave, want: true},
		"a Group subject selects a group of the user":           {match: `any: [{resources: {kinds: [Pod]}, subjects: [{kind: Group, name: devs}]}]`, res: pod, adm: dave, want: true},
		"a User subject is no group":                            {match: `any: [{resources: {kinds: [Pod]}, subjects: [{kind: User, name: devs}]}]`, res: pod, adm: dave},
		"a ServiceAccount subject selects the account":          {match: `any: [{resources: {kinds: [Pod]}, subjects: [{kind: ServiceAccount, namespace: kube-system, name: "*-controller"}]}]`, res: pod, adm: sa, want: true},
		"a ServiceAccount subject checks the namespace":         {match: `any: [{resources: {kinds: [Pod]}, subjects: [{kind: ServiceAccount, namespace: default, name: replicaset-controller}]}]`, res: pod, adm: sa},
		"roles select the user's roles":                         {match: `any: [{resources: {kinds: [Pod]}, roles: ["prod:editor"]}]`, res: pod, adm: dave, want: true},
		"roles reject other roles":                              {match: `any: [{resources: {kinds: [Pod]}, roles: ["prod:admin"]}]`, res: pod, adm: dave},
		"clusterRoles select the user's cluster roles":          {match: `any: [{resources: {kinds: [Pod]}, clusterRoles: [view, edit]}]`, res: pod, adm: dave, want: true},
		"roles and subjects must both hold":                     {match: `any: [{resources: {kinds: [Pod]}, roles: ["prod:editor"], subjects: [{kind: User, name: mary}]}]`, res: pod, adm: dave},
		"exclude clusterRoles removes the user's requests":      {match: `any: [{resources: {kinds: [Pod]}}]`, exclude: `any: [{clusterRoles: [cluster-admin]}]`, res: pod, adm: admin},
		"exclude clusterRoles keeps other users' requests":      {match: `any: [{resources: {kinds: [Pod]}}]`, exclude: `any: [{clusterRoles: [cluster-admin]}]`, res: pod, adm: dave, want: true},
		"exclude by user excludes nothing in background":        {match: `any: [{resources: {kinds: [Pod]}}]`, exclude: `any: [{clusterRoles: [cluster-admin]}]`, res: pod, want: true},
		"exclude by resource and user needs the user":           {match: `any: [{resources: {kinds: [Pod]}}]`, exclude: `any: [{resources: {namespaces: [prod]}, subjects: [{kind: User, name: dave}]}]`, res: pod, want: true},
		"the legacy inline user criteria select":                {match: `{resources: {kinds: [Pod]}, subjects: [{kind: User, name: dave}]}`, res: pod, adm: dave, want: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var ex *kyvernov1.MatchResources
			if tc.exclude != "" {
				e := mr(t, tc.exclude)
				ex = &e
			}
			got, err := Matches(mr(t, tc.match), ex, tc.res, tc.nsLabels, tc.adm)
			if err != nil {
				t.Fatalf("Matches: %v", err)
			}
			if got != tc.want {
				t.Errorf("Matches = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCompileErrors(t *testing.T) {
	tests := map[string]struct {
		match, exclude string
		wantErr        string
	}{
		"a kind with too many parts":         {match: `any: [{resources: {kinds: [a/b/c/d/e]}}]`, wantErr: "match.any[0].resources.kinds"},
		"an empty kind":                      {match: `all: [{resources: {kinds: [Pod]}}, {resources: {kinds: [""]}}]`, wantErr: "match.all[1].resources.kinds"},
		"an unknown selector operator":       {match: `any: [{resources: {kinds: [Pod], selector: {matchExpressions: [{key: a, operator: Near}]}}}]`, wantErr: "match.any[0].resources.selector"},
		"an invalid label value":             {match: `resources: {kinds: [Pod], selector: {matchLabels: {a: "b c"}}}`, wantErr: "match.resources.selector"},
		"a bad namespaceSelector in exclude": {match: `any: [{resources: {kinds: [Pod]}}]`, exclude: `any: [{resources: {namespaceSelector: {matchExpressions: [{key: a, operator: In}]}}}]`, wantErr: "exclude.any[0].resources.namespaceSelector"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var ex *kyvernov1.MatchResources
			if tc.exclude != "" {
				e := mr(t, tc.exclude)
				ex = &e
			}
			_, err := Compile(mr(t, tc.match), ex)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Compile error = %v, want one naming %q", err, tc.wantErr)
			}
			if _, err := Matches(mr(t, tc.match), ex, pod, nil, nil); err == nil {
				t.Error("Matches gave no error")
			}
		})
	}
}

func TestInPolicyNamespace(t *testing.T) {
	tests := map[string]struct {
		policyNamespace string
		res             Resource
		want            bool
	}{
		"a ClusterPolicy applies to namespaced resources":      {"", pod, true},
		"a ClusterPolicy applies to cluster-scoped resources":  {"", clusterRole, true},
		"a Policy applies in its namespace":                    {"prod", pod, true},
		"a Policy does not apply in another namespace":         {"dev", pod, false},
		"a Policy does not apply to cluster-scoped resources":  {"prod", clusterRole, false},
		"a Policy does not apply to the Namespace of its name": {"prod", namespace, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := InPolicyNamespace(tc.policyNamespace, tc.res); got != tc.want {
				t.Errorf("InPolicyNamespace = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestKinds(t *testing.T) {
	tests := map[string]struct {
		match string
		want  []string
	}{
		"any lists every filter's kinds once":          {`any: [{resources: {kinds: [Pod, "apps/v1/Deployment"]}}, {resources: {kinds: [Pod, Service]}}]`, []string{"Pod", "apps/v1/Deployment", "Service"}},
		"an any filter without kinds selects all":      {`any: [{resources: {kinds: [Pod]}}, {resources: {namespaces: [prod]}}]`, []string{"Pod", "*"}},
		"all lists the kinds of the filters with some": {`all: [{resources: {kinds: [Pod]}}, {resources: {namespaces: [prod]}}]`, []string{"Pod"}},
		"all without kinds selects all":                {`all: [{resources: {namespaces: [prod]}}]`, []string{"*"}},
		"the inline filter lists its kinds":            {`resources: {kinds: ["Pod/status", "*/Node"]}`, []string{"Pod/status", "*/Node"}},
		"wildcards are kept":                           {`any: [{resources: {kinds: ["*"]}}]`, []string{"*"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := Kinds(mr(t, tc.match))
			if !slices.Equal(got, tc.want) {
				t.Errorf("Kinds = %q, want %q", got, tc.want)
			}
			m, err := Compile(mr(t, tc.match), nil)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(m.Kinds(), tc.want) {
				t.Errorf("Matcher.Kinds = %q, want %q", m.Kinds(), tc.want)
			}
		})
	}
}

func TestUsesNamespaceLabels(t *testing.T) {
	tests := map[string]struct {
		match, exclude string
		want           bool
	}{
		"a match namespaceSelector":    {`any: [{resources: {kinds: [Pod], namespaceSelector: {}}}]`, ``, true},
		"an exclude namespaceSelector": {`any: [{resources: {kinds: [Pod]}}]`, `any: [{resources: {namespaceSelector: {matchLabels: {a: b}}}}]`, true},
		"no namespaceSelector":         {`any: [{resources: {kinds: [Pod], namespaces: [prod]}}]`, `any: [{resources: {selector: {}}}]`, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var ex *kyvernov1.MatchResources
			if tc.exclude != "" {
				e := mr(t, tc.exclude)
				ex = &e
			}
			m, err := Compile(mr(t, tc.match), ex)
			if err != nil {
				t.Fatal(err)
			}
			if got := m.UsesNamespaceLabels(); got != tc.want {
				t.Errorf("UsesNamespaceLabels = %v, want %v", got, tc.want)
			}
		})
	}
}
