package podsecurity

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/randfill"
)

// TestDecodeKeepsWhatChecksRead compares every revision of every check on
// pods as typed values and as read by PodOf from JSON values (int64, float64
// and json.Number numbers), wrapped in each kind: pods drawn by podGen, which
// hits allowed and forbidden values, and pods whose every field is filled at
// random, which would reveal a field the decoder drops and a check reads.
func TestDecodeKeepsWhatChecksRead(t *testing.T) {
	g := newPodGen(2)
	fill := randfill.NewWithSeed(3).NilChance(0.3).NumElements(0, 3).Funcs(
		func(q *resource.Quantity, c randfill.Continue) {
			*q = resource.MustParse(strconv.Itoa(c.Intn(100)) + "Mi")
		},
		func(i *intstr.IntOrString, c randfill.Continue) { *i = intstr.FromInt32(int32(c.Intn(65535))) },
		func(m *metav1.ObjectMeta, c randfill.Continue) {
			m.Name = c.String(8)
			c.Fill(&m.Annotations)
			if m.Annotations == nil {
				m.Annotations = map[string]string{}
			}
			for range c.Intn(3) {
				m.Annotations[corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix+c.String(4)] = c.String(4)
			}
		},
	)
	checks := policy.DefaultChecks()
	for i := range 1000 {
		meta, spec := g.pod()
		if i%2 == 1 {
			meta, spec = &metav1.ObjectMeta{}, &corev1.PodSpec{}
			fill.Fill(meta)
			fill.Fill(spec)
		}
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&corev1.Pod{ObjectMeta: *meta, Spec: *spec})
		if err != nil {
			t.Fatal(err)
		}
		data, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		var floats, numbers map[string]any
		if err := json.Unmarshal(data, &floats); err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		if err := dec.Decode(&numbers); err != nil {
			t.Fatal(err)
		}
		for name, m := range map[string]map[string]any{"int64": obj, "float64": floats, "json.Number": numbers} {
			for kind, wrapped := range wrappings(m) {
				pod, err := PodOf(kind, wrapped)
				if err != nil {
					t.Fatalf("%s with %s numbers: %v", kind, name, err)
				}
				for _, chk := range checks {
					for _, vc := range chk.Versions {
						want, got := vc.CheckPod(meta, spec), vc.CheckPod(pod.Meta, pod.Spec)
						if got != want {
							t.Fatalf("%s@%s on a %s with %s numbers: got %+v, want %+v", chk.ID, vc.MinimumVersion, kind, name, got, want)
						}
					}
				}
			}
		}
	}
}

// wrappings returns the pod, and its metadata and spec as the pod template
// of a Deployment and of a CronJob.
func wrappings(pod map[string]any) map[string]map[string]any {
	tmpl := map[string]any{"metadata": pod["metadata"], "spec": pod["spec"]}
	return map[string]map[string]any{
		"Pod":        pod,
		"Deployment": {"kind": "Deployment", "spec": map[string]any{"template": tmpl}},
		"CronJob": {"kind": "CronJob", "spec": map[string]any{
			"jobTemplate": map[string]any{"spec": map[string]any{"template": tmpl}}}},
	}
}

func TestPodOf(t *testing.T) {
	tests := map[string]struct {
		kind     string
		resource string
		want     func(*Pod) bool
	}{
		"a pod": {
			kind:     "Pod",
			resource: "kind: Pod\nmetadata: {name: p, namespace: ns, annotations: {a: b}}\nspec: {hostPID: true, containers: [{name: c, image: i}]}\n",
			want: func(p *Pod) bool {
				return p.Meta.Name == "p" && p.Meta.Namespace == "ns" && p.Meta.Annotations["a"] == "b" && p.Spec.HostPID &&
					p.Spec.Containers[0].Image == "i" && p.paths == podPaths
			},
		},
		"a stateful set": {
			kind:     "StatefulSet",
			resource: "kind: StatefulSet\nspec: {template: {metadata: {annotations: {a: b}}, spec: {hostIPC: true, containers: [{name: c}]}}}\n",
			want:     func(p *Pod) bool { return p.Spec.HostIPC && p.Meta.Annotations["a"] == "b" && p.paths == templatePaths },
		},
		"a job without template metadata": {
			kind:     "Job",
			resource: "kind: Job\nspec: {template: {spec: {containers: [{name: c}]}}}\n",
			want:     func(p *Pod) bool { return p.Meta != nil && len(p.Spec.Containers) == 1 },
		},
		"a cron job": {
			kind:     "CronJob",
			resource: "kind: CronJob\nspec: {jobTemplate: {spec: {template: {spec: {hostNetwork: true, containers: [{name: c}]}}}}}\n",
			want:     func(p *Pod) bool { return p.Spec.HostNetwork && p.paths == cronJobPaths },
		},
		"a volume keeps its type and its host path": {
			kind: "Pod",
			resource: "kind: Pod\nspec:\n  containers: [{name: c}]\n  volumes:\n  - {name: a, hostPath: {path: /data, type: Directory}}\n" +
				"  - {name: b, projected: {sources: [{serviceAccountToken: {path: t, expirationSeconds: 3600}}]}}\n",
			want: func(p *Pod) bool {
				return p.Spec.Volumes[0].HostPath.Path == "/data" && p.Spec.Volumes[1].Projected != nil && p.Spec.Volumes[1].Name == "b"
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p, err := PodOf(tc.kind, object(t, tc.resource))
			if err != nil {
				t.Fatal(err)
			}
			if !tc.want(p) {
				t.Errorf("unexpected pod: %+v %+v", p.Meta, p.Spec)
			}
		})
	}
}

func TestPathRewrite(t *testing.T) {
	tests := map[string]struct {
		paths pathPrefix
		in    string
		want  string
	}{
		"a pod keeps its paths": {podPaths, "spec.containers[0].securityContext.privileged", "spec.containers[0].securityContext.privileged"},
		"a deployment's spec":   {templatePaths, "spec.hostPID", "spec.template.spec.hostPID"},
		"a deployment's annotations": {
			templatePaths, "metadata.annotations[container.apparmor.security.beta.kubernetes.io/c]",
			"spec.template.metadata.annotations[container.apparmor.security.beta.kubernetes.io/c]",
		},
		"a cron job's spec":   {cronJobPaths, "spec.volumes[0].hostPath", "spec.jobTemplate.spec.template.spec.volumes[0].hostPath"},
		"a pod built by hand": {pathPrefix{}, "spec.hostPID", "spec.hostPID"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := tc.paths.rewrite(tc.in); got != tc.want {
				t.Errorf("rewrite(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// TestEvaluatePodOnAHandBuiltPod: a Pod built from typed values (no kind)
// is evaluated with pod paths.
func TestEvaluatePodOnAHandBuiltPod(t *testing.T) {
	c, err := Compile(baseline())
	if err != nil {
		t.Fatal(err)
	}
	got := c.EvaluatePod(&Pod{Meta: &metav1.ObjectMeta{}, Spec: &corev1.PodSpec{HostPID: true}})
	want := `It violates PodSecurity "baseline:latest": (Forbidden reason: host namespaces, field error list: [spec.hostPID is forbidden, forbidden values found: true])`
	if got.Pass || got.Message != want {
		t.Errorf("got %+v, want message %s", got, want)
	}
}

func TestDecodeErrorsNameTheField(t *testing.T) {
	tests := map[string]struct {
		kind     string
		resource string
		want     string
	}{
		"a boolean as a string": {
			kind:     "Pod",
			resource: pod("    containers: [{name: a}, {name: b, securityContext: {privileged: 'true'}}]\n"),
			want:     "read spec: containers[1].securityContext.privileged: string is not a boolean",
		},
		"a fractional user id": {
			kind:     "Deployment",
			resource: "kind: Deployment\nspec: {template: {spec: {securityContext: {runAsUser: 1.5}, containers: [{name: a}]}}}\n",
			want:     "read spec.template.spec: securityContext.runAsUser: float64 is not an integer",
		},
		"a volume source that is not an object": {
			kind:     "Pod",
			resource: pod("    containers: [{name: a}]\n    volumes: [{name: v, nfs: x}]\n"),
			want:     "read spec: volumes[0].nfs: string is not an object",
		},
		"a host port out of range": {
			kind:     "Pod",
			resource: pod("    containers: [{name: a, ports: [{hostPort: 4294967296}]}]\n"),
			want:     "read spec: containers[0].ports[0].hostPort: 4294967296 is out of range",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := PodOf(tc.kind, object(t, tc.resource))
			if err == nil || err.Error() != tc.want {
				t.Errorf("err = %v, want %s", err, tc.want)
			}
		})
	}
}
