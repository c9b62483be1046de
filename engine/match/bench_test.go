package match

import "testing"

// benchRule is a typical ClusterPolicy rule: kinds, namespaces with a
// wildcard, a label selector with both plain and wildcard entries, and an
// exclude of system namespaces.
const (
	benchMatch   = `any: [{resources: {kinds: [Pod, "apps/v1/Deployment"], namespaces: ["prod-*", staging], selector: {matchLabels: {app: web, "tier": "front*"}, matchExpressions: [{key: env, operator: In, values: [prod, staging]}]}}}]`
	benchExclude = `any: [{resources: {namespaces: [kube-system, kyverno]}}]`
)

var benchPod = Resource{
	Version: "v1", Kind: "Pod", Name: "web-7d9f8c-abcde", Namespace: "prod-eu",
	Labels: map[string]string{
		"app": "web", "tier": "frontend", "env": "prod",
		"pod-template-hash": "7d9f8c", "app.kubernetes.io/name": "web",
	},
}

func BenchmarkMatches(b *testing.B) {
	exclude := mr(b, benchExclude)
	m, err := Compile(mr(b, benchMatch), &exclude)
	if err != nil {
		b.Fatal(err)
	}
	res := benchPod
	if !m.Matches(&res, nil, nil) {
		b.Fatal("the benchmark rule does not match the Pod")
	}
	b.ReportAllocs()
	for b.Loop() {
		m.Matches(&res, nil, nil)
	}
}

// BenchmarkMatchesUncompiled is the one-shot Matches, which compiles the
// rule at every call.
func BenchmarkMatchesUncompiled(b *testing.B) {
	match, exclude := mr(b, benchMatch), mr(b, benchExclude)
	b.ReportAllocs()
	for b.Loop() {
		if ok, err := Matches(match, &exclude, benchPod, nil, nil); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}

// BenchmarkMatchesOtherKind is the common case of a scan: a rule meets a
// resource of another kind.
func BenchmarkMatchesOtherKind(b *testing.B) {
	exclude := mr(b, benchExclude)
	m, err := Compile(mr(b, benchMatch), &exclude)
	if err != nil {
		b.Fatal(err)
	}
	res := Resource{Version: "v1", Kind: "ConfigMap", Name: "cfg", Namespace: "prod-eu"}
	b.ReportAllocs()
	for b.Loop() {
		m.Matches(&res, nil, nil)
	}
}
