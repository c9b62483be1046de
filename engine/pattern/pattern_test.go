package pattern

import (
	"encoding/json"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// fromYAML decodes YAML into the JSON data model, as policies and resources
// reach the engine.
func fromYAML(t testing.TB, s string) any {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(s))
	if err != nil {
		t.Fatalf("yaml: %v\n%s", err, s)
	}
	var v any
	if err := json.Unmarshal(j, &v); err != nil {
		t.Fatalf("json: %v", err)
	}
	return v
}

const istioPod = `
spec:
  containers:
  - name: istio-init
    securityContext: {runAsUser: 0}
  - name: app
    securityContext: {runAsUser: 1000}
`

const dockerSockPattern = `
metadata:
  labels:
    allow-docker: "true"
(spec):
  (volumes):
  - (hostPath):
      path: /var/run/docker.sock
`

const globalPattern = `
spec:
  containers:
  - name: "*"
    <(image): "corp.reg.com/*"
  imagePullSecrets:
  - name: my-registry-secret
`

func TestValidate(t *testing.T) {
	tests := map[string]struct {
		resource, pattern string
		want              Status
		wantPath          string // checked when not empty
	}{
		"a matching label passes": {
			resource: `{metadata: {labels: {purpose: production}}}`,
			pattern:  `{metadata: {labels: {purpose: production}}}`,
			want:     Pass,
		},
		"a different label value fails at the label": {
			resource: `{metadata: {labels: {purpose: development}}}`,
			pattern:  `{metadata: {labels: {purpose: production}}}`,
			want:     Fail, wantPath: "/metadata/labels/purpose/",
		},
		"a field missing for ?* fails at the field": {
			resource: `{metadata: {labels: {other: x}}}`,
			pattern:  `{metadata: {labels: {app: "?*"}}}`,
			want:     Fail, wantPath: "/metadata/labels/app/",
		},
		"a field missing for * fails at the object holding it, as in Kyverno": {
			resource: `{metadata: {labels: {other: x}}}`,
			pattern:  `{metadata: {labels: {app: "*"}}}`,
			want:     Fail, wantPath: "/metadata/labels/",
		},
		"an empty value satisfies * but not ?*": {
			resource: `{metadata: {labels: {app: ""}}}`,
			pattern:  `{metadata: {labels: {app: "*", tier: "?*"}}}`,
			want:     Fail, wantPath: "/metadata/labels/tier/",
		},
		"* accepts an object": {
			resource: `{spec: {securityContext: {runAsUser: 1}}}`,
			pattern:  `{spec: {securityContext: "*"}}`,
			want:     Pass,
		},
		"a missing object fails where the object should be": {
			resource: `{spec: {containers: []}}`,
			pattern:  `{spec: {securityContext: {runAsNonRoot: true}}}`,
			want:     Fail, wantPath: "/spec/securityContext/",
		},
		"a list where an object is expected fails": {
			resource: `{spec: [1, 2]}`,
			pattern:  `{spec: {replicas: 1}}`,
			want:     Fail, wantPath: "/spec/",
		},
		"a resource that is not an object fails at the root": {
			resource: `"just a string"`,
			pattern:  `{spec: {}}`,
			want:     Fail, wantPath: "/",
		},
		"a one-element list pattern applies to every element": {
			resource: `{spec: {containers: [{name: a, image: "nginx:1.25"}, {name: b, image: "nginx:latest"}]}}`,
			pattern:  `{spec: {containers: [{image: "!*:latest"}]}}`,
			want:     Fail, wantPath: "/spec/containers/1/image/",
		},
		"the first failing field is reported": {
			resource: `{spec: {containers: [{securityContext: {privileged: true}}, {securityContext: {privileged: true}}]}}`,
			pattern:  `{spec: {containers: [{=(securityContext): {=(privileged): "false"}}]}}`,
			want:     Fail, wantPath: "/spec/containers/0/securityContext/privileged/",
		},
		"an empty resource list passes": {
			resource: `{spec: {containers: []}}`,
			pattern:  `{spec: {containers: [{image: "!*:latest"}]}}`,
			want:     Pass,
		},
		"a scalar list pattern must be matched by every element": {
			resource: `{spec: {dnsNames: [a.corp.com, b.corp.com]}}`,
			pattern:  `{spec: {dnsNames: ["*.corp.com"]}}`,
			want:     Pass,
		},
		"a scalar list pattern fails on one bad element, at the list": {
			resource: `{spec: {dnsNames: [a.corp.com, evil.com]}}`,
			pattern:  `{spec: {dnsNames: ["*.corp.com"]}}`,
			want:     Fail, wantPath: "/spec/dnsNames/",
		},
		"a scalar pattern applies to every element of a resource list": {
			resource: `{args: ["--a", "--b"]}`,
			pattern:  `{args: "--*"}`,
			want:     Pass,
		},
		"a list pattern of several objects only uses its first, as Kyverno does": {
			resource: `{tags: [{key: xx}, {key: xx}]}`,
			pattern:  `{tags: [{key: xx}, {key: yy}]}`,
			want:     Pass,
		},
		"nested list patterns compare element by element": {
			resource: `{m: [["a1", "a2"], ["b1"], ["c1"]]}`,
			pattern:  `{m: [["a*"], ["c*"]]}`,
			want:     Fail, wantPath: "/m/1/",
		},
		"an empty list pattern fails": {
			resource: `{a: [1]}`,
			pattern:  `{a: []}`,
			want:     Fail, wantPath: "/a/",
		},
		"an integer pattern matches a float resource value": {
			resource: `{spec: {replicas: 3.0}}`,
			pattern:  `{spec: {replicas: 3}}`,
			want:     Pass,
		},
		"a string operator compares a number": {
			resource: `{spec: {replicas: 1}}`,
			pattern:  `{spec: {replicas: ">=2"}}`,
			want:     Fail, wantPath: "/spec/replicas/",
		},
		"a null pattern accepts a missing field": {
			resource: `{spec: {}}`,
			pattern:  `{spec: {hostPath: null}}`,
			want:     Pass,
		},
		"an empty string pattern accepts a missing field": {
			resource: `{spec: {}}`,
			pattern:  `{spec: {hostPath: ""}}`,
			want:     Pass,
		},
		"a negated value still requires the field": {
			resource: `{spec: {containers: [{name: a}]}}`,
			pattern:  `{spec: {containers: [{imagePullPolicy: "!Always"}]}}`,
			want:     Fail, wantPath: "/spec/containers/0/imagePullPolicy/",
		},

		// Equality anchors.
		"an equality anchor accepts an absent key": {
			resource: `{spec: {}}`,
			pattern:  `{spec: {=(hostNetwork): "false"}}`,
			want:     Pass,
		},
		"an equality anchor checks a present key": {
			resource: `{spec: {hostNetwork: true}}`,
			pattern:  `{spec: {=(hostNetwork): "false"}}`,
			want:     Fail, wantPath: "/spec/hostNetwork/",
		},
		"nested equality anchors check only what is there": {
			resource: `{spec: {securityContext: {runAsNonRoot: false}}}`,
			pattern:  `{spec: {=(securityContext): {=(runAsNonRoot): true}}}`,
			want:     Fail, wantPath: "/spec/securityContext/runAsNonRoot/",
		},
		"nested equality anchors pass when the inner key is absent": {
			resource: `{spec: {securityContext: {runAsUser: 1}}}`,
			pattern:  `{spec: {=(securityContext): {=(runAsNonRoot): true}}}`,
			want:     Pass,
		},
		"an equality anchor on a list with a negation anchor inside": {
			resource: `{spec: {volumes: [{name: a, emptyDir: {}}, {name: b, hostPath: {path: /etc}}]}}`,
			pattern:  `{spec: {=(volumes): [{X(hostPath): "null"}]}}`,
			want:     Fail, wantPath: "/spec/volumes/1/hostPath/",
		},
		"an equality anchor with a wildcard alternative": {
			resource: `{spec: {securityContext: {seccompProfile: {type: Localhost}}}}`,
			pattern:  `{spec: {=(securityContext): {=(seccompProfile): {=(type): "RuntimeDefault | Localhost"}}}}`,
			want:     Pass,
		},

		// Negation anchors.
		"a negation anchor accepts an absent key": {
			resource: `{spec: {volumes: [{name: a, emptyDir: {}}]}}`,
			pattern:  `{spec: {=(volumes): [{X(hostPath): "null"}]}}`,
			want:     Pass,
		},
		"a negation anchor ignores its value": {
			resource: `{spec: {nodeName: "null"}}`,
			pattern:  `{spec: {X(nodeName): "null"}}`,
			want:     Fail, wantPath: "/spec/nodeName/",
		},

		// Conditional anchors.
		"a condition that holds applies its siblings": {
			resource: `{spec: {containers: [{image: "nginx:latest", imagePullPolicy: IfNotPresent}]}}`,
			pattern:  `{spec: {containers: [{(image): "*:latest", imagePullPolicy: "!IfNotPresent"}]}}`,
			want:     Fail, wantPath: "/spec/containers/0/imagePullPolicy/",
		},
		"a condition that does not hold skips": {
			resource: `{spec: {containers: [{image: "nginx:1.25", imagePullPolicy: IfNotPresent}]}}`,
			pattern:  `{spec: {containers: [{(image): "*:latest", imagePullPolicy: "!IfNotPresent"}]}}`,
			want:     Skip, wantPath: "/spec/containers/",
		},
		"a condition on a missing key skips": {
			resource: `{metadata: {name: x}}`,
			pattern:  `{(spec): {hostNetwork: false}, metadata: {labels: {app: "?*"}}}`,
			want:     Skip, wantPath: "/spec/",
		},
		"elements skipped by a condition do not count when another element passes": {
			resource: istioPod,
			pattern:  `{spec: {containers: [{(name): "!istio-init", securityContext: {runAsUser: ">0"}}]}}`,
			want:     Pass,
		},
		"an element whose condition holds can still fail": {
			resource: istioPod,
			pattern:  `{spec: {containers: [{(name): "!sidecar", securityContext: {runAsUser: ">0"}}]}}`,
			want:     Fail, wantPath: "/spec/containers/0/securityContext/runAsUser/",
		},
		"a condition on an object needs all of it": {
			resource: `{spec: {securityContext: {runAsUser: 0, fsGroup: 0}, hostPID: true}}`,
			pattern:  `{spec: {(securityContext): {runAsUser: 0, fsGroup: 1}, hostPID: false}}`,
			want:     Skip,
		},
		"a conditional object with a list: the documented docker socket example without volumes": {
			resource: `{metadata: {labels: {run: nginx}}, spec: {containers: [{name: nginx, image: nginx}]}}`,
			pattern:  dockerSockPattern,
			want:     Skip,
		},
		"the docker socket example with another hostPath volume": {
			resource: `{metadata: {labels: {run: nginx}}, spec: {volumes: [{name: v, hostPath: {path: /data}}]}}`,
			pattern:  dockerSockPattern,
			want:     Skip,
		},
		"the docker socket example with the socket and no label": {
			resource: `{metadata: {labels: {run: nginx}}, spec: {volumes: [{name: e, emptyDir: {}}, {name: v, hostPath: {path: /var/run/docker.sock}}]}}`,
			pattern:  dockerSockPattern,
			want:     Fail, wantPath: "/metadata/labels/allow-docker/",
		},
		"the docker socket example with the socket and the label": {
			resource: `{metadata: {labels: {allow-docker: "true"}}, spec: {volumes: [{name: v, hostPath: {path: /var/run/docker.sock}}]}}`,
			pattern:  dockerSockPattern,
			want:     Pass,
		},
		"a skip under a key with anchors outranks a failure in a plain sibling": {
			resource: `{metadata: {labels: {}}, spec: {volumes: [{name: e, emptyDir: {}}]}}`,
			pattern:  `{metadata: {labels: {allow-docker: "true"}}, spec: {volumes: [{(hostPath): {path: /var/run/docker.sock}}]}}`,
			want:     Skip,
		},
		"a failure under a key with anchors outranks a skip": {
			resource: `{spec: {containers: [{image: "a:1"}], initContainers: [{image: "b:latest", imagePullPolicy: Never}]}}`,
			pattern:  `{spec: {containers: [{(image): "*:latest", imagePullPolicy: Always}], initContainers: [{(image): "*:latest", imagePullPolicy: Always}]}}`,
			want:     Fail, wantPath: "/spec/initContainers/0/imagePullPolicy/",
		},
		"a list under a plain key whose every element a condition excludes skips its object": {
			resource: `{spec: {containers: [{name: app, env: [{name: OTHER, value: x}]}]}}`,
			pattern:  `{spec: {containers: [{name: "*", env: [{(name): DEBUG, value: "false"}]}]}}`,
			want:     Skip, wantPath: "/spec/containers/",
		},
		"a list under a plain key with an element whose condition holds decides on it": {
			resource: `{spec: {containers: [{name: app, env: [{name: OTHER, value: x}, {name: DEBUG, value: "true"}]}]}}`,
			pattern:  `{spec: {containers: [{name: "*", env: [{(name): DEBUG, value: "false"}]}]}}`,
			want:     Fail, wantPath: "/spec/containers/0/env/1/value/",
		},
		"a plain sibling's failure outranks an anchored list whose every element was excluded": {
			resource: `{spec: {initContainers: [{name: istio-init}], containers: [{image: "nginx:latest"}]}}`,
			pattern:  `{spec: {=(initContainers): [{(name): "!istio-init", securityContext: {runAsNonRoot: true}}], containers: [{image: "!*:latest"}]}}`,
			want:     Fail, wantPath: "/spec/containers/0/image/",
		},
		"a plain sibling that passes overrides an anchored list whose every element was excluded": {
			resource: `{spec: {initContainers: [{name: istio-init}], containers: [{image: "nginx:1.25"}]}}`,
			pattern:  `{spec: {=(initContainers): [{(name): "!istio-init", securityContext: {runAsNonRoot: true}}], containers: [{image: "!*:latest"}]}}`,
			want:     Pass,
		},
		"an equality anchor failure outranks a skip in a sibling": {
			resource: `{spec: {hostPID: true, containers: [{image: "a:1"}]}}`,
			pattern:  `{spec: {=(hostPID): false, containers: [{(image): "*:latest", imagePullPolicy: Always}]}}`,
			want:     Fail, wantPath: "/spec/hostPID/",
		},

		// Existence anchors.
		"an existence anchor needs one matching element": {
			resource: `{spec: {containers: [{image: "busybox"}, {image: "nginx:latest"}]}}`,
			pattern:  `{spec: {^(containers): [{image: "nginx:latest"}]}}`,
			want:     Pass,
		},
		"an existence anchor fails when no element matches": {
			resource: `{spec: {containers: [{image: "busybox"}, {image: "redis"}]}}`,
			pattern:  `{spec: {^(containers): [{image: "nginx:latest"}]}}`,
			want:     Fail, wantPath: "/spec/containers/",
		},
		"an existence anchor needs a match for each of its elements": {
			resource: `{spec: {containers: [{image: "busybox"}, {image: "nginx:latest"}]}}`,
			pattern:  `{spec: {^(containers): [{image: "nginx:latest"}, {image: "redis*"}]}}`,
			want:     Fail, wantPath: "/spec/containers/",
		},
		"an existence anchor works on a list of strings": {
			resource: `{spec: {args: ["--debug", "--port=80"]}}`,
			pattern:  `{spec: {^(args): ["--port=*"]}}`,
			want:     Pass,
		},
		"an existence anchor accepts an absent key": {
			resource: `{spec: {}}`,
			pattern:  `{spec: {^(initContainers): [{name: init}]}}`,
			want:     Pass,
		},
		"an existence anchor on something other than a list fails": {
			resource: `{spec: {containers: {name: a}}}`,
			pattern:  `{spec: {^(containers): [{name: a}]}}`,
			want:     Fail, wantPath: "/spec/containers/",
		},

		// Global anchors.
		"a global anchor that holds applies the whole rule": {
			resource: `{spec: {containers: [{name: web, image: corp.reg.com/nginx}], imagePullSecrets: [{name: other-secret}]}}`,
			pattern:  globalPattern,
			want:     Fail, wantPath: "/spec/imagePullSecrets/0/name/",
		},
		"a global anchor that holds with the right secret passes": {
			resource: `{spec: {containers: [{name: web, image: corp.reg.com/nginx}], imagePullSecrets: [{name: my-registry-secret}]}}`,
			pattern:  globalPattern,
			want:     Pass,
		},
		"a global anchor that does not hold skips the rule whatever the siblings": {
			resource: `{spec: {containers: [{name: web, image: docker.io/nginx}], imagePullSecrets: [{name: other-secret}]}}`,
			pattern:  globalPattern,
			want:     Skip, wantPath: "/spec/containers/",
		},
		"a global skip outranks a failure under anchors elsewhere": {
			resource: `{metadata: {annotations: {nfs.io/storage-path: ""}}, spec: {storageClassName: gold}}`,
			pattern:  `{metadata: {=(annotations): {=(nfs.io/storage-path): "?*"}}, spec: {<(storageClassName): nfs-client}}`,
			want:     Skip, wantPath: "/spec/storageClassName/",
		},
		"a global anchor on a missing key holds, so its siblings apply": {
			resource: `{metadata: {annotations: {nfs.io/storage-path: ""}}, spec: {}}`,
			pattern:  `{metadata: {=(annotations): {=(nfs.io/storage-path): "?*"}}, spec: {<(storageClassName): nfs-client}}`,
			want:     Fail, wantPath: "/metadata/annotations/nfs.io/storage-path/",
		},

		// Add anchors and wildcard keys.
		"an add anchor is ignored by validation": {
			resource: `{metadata: {labels: {}}}`,
			pattern:  `{metadata: {labels: {+(team): platform}}}`,
			want:     Pass,
		},
		"a wildcard annotation key under a negation anchor rejects any match": {
			resource: `{metadata: {annotations: {fluxcd.io/automated: "true", other: x}}}`,
			pattern:  `{metadata: {=(annotations): {X(fluxcd.io/*): "*?"}}}`,
			want:     Fail, wantPath: "/metadata/annotations/fluxcd.io/automated/",
		},
		"a wildcard annotation key under a negation anchor accepts no match": {
			resource: `{metadata: {annotations: {other: x}}}`,
			pattern:  `{metadata: {=(annotations): {X(fluxcd.io/*): "*?"}}}`,
			want:     Pass,
		},
		"a wildcard label key applies to every matching label": {
			resource: `{metadata: {labels: {app.kubernetes.io/name: web, app.kubernetes.io/part-of: ""}}}`,
			pattern:  `{metadata: {labels: {app.kubernetes.io/*: "?*"}}}`,
			want:     Fail, wantPath: "/metadata/labels/app.kubernetes.io/part-of/",
		},
		"a wildcard label key with no match is a missing label": {
			resource: `{metadata: {labels: {team: a}}}`,
			pattern:  `{metadata: {labels: {app.kubernetes.io/*: "?*"}}}`,
			want:     Fail, wantPath: "/metadata/labels/app.kubernetes.io/*/",
		},
		"wildcards in keys outside metadata are literal": {
			resource: `{data: {a1: x}}`,
			pattern:  `{data: {a*: "?*"}}`,
			want:     Fail, wantPath: "/data/a*/",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := Validate(fromYAML(t, tc.resource), fromYAML(t, tc.pattern))
			if got.Status != tc.want {
				t.Fatalf("status = %v, want %v (path %q: %s)", got.Status, tc.want, got.Path, got.Message)
			}
			if tc.wantPath != "" && got.Path != tc.wantPath {
				t.Errorf("path = %q, want %q (%s)", got.Path, tc.wantPath, got.Message)
			}
			if got.Status != Pass && got.Message == "" {
				t.Errorf("no message for %v", got.Status)
			}
			if got.Status == Pass && (got.Path != "" || got.Message != "") {
				t.Errorf("pass with path %q and message %q", got.Path, got.Message)
			}
		})
	}
}

func TestValidateNumberRepresentations(t *testing.T) {
	resources := map[string]any{
		"float64":     map[string]any{"runAsUser": float64(1000)},
		"int64":       map[string]any{"runAsUser": int64(1000)},
		"int":         map[string]any{"runAsUser": 1000},
		"json.Number": map[string]any{"runAsUser": json.Number("1000")},
		"string":      map[string]any{"runAsUser": "1000"},
	}
	patterns := map[string]any{
		"float64":      map[string]any{"runAsUser": float64(1000)},
		"int64":        map[string]any{"runAsUser": int64(1000)},
		"json.Number":  map[string]any{"runAsUser": json.Number("1000")},
		"string":       map[string]any{"runAsUser": "1000"},
		"operator":     map[string]any{"runAsUser": ">999"},
		"range":        map[string]any{"runAsUser": "1-1000"},
		"json.Number2": map[string]any{"runAsUser": json.Number("1e3")},
	}
	for rn, r := range resources {
		for pn, p := range patterns {
			t.Run(rn+" against "+pn, func(t *testing.T) {
				if got := Validate(r, p); got.Status != Pass {
					t.Errorf("got %v at %s: %s", got.Status, got.Path, got.Message)
				}
			})
		}
	}
}

func TestValidateAny(t *testing.T) {
	// The documented anyPattern: runAsNonRoot at Pod level, or on every container.
	anyPattern := fromYAML(t, `
- spec:
    securityContext:
      runAsNonRoot: true
    containers:
    - =(securityContext):
        =(runAsNonRoot): true
- spec:
    containers:
    - securityContext:
        runAsNonRoot: true
`).([]any)
	conditional := fromYAML(t, `
- spec: {(hostNetwork): true, hostPID: false}
- spec: {(hostIPC): true, hostPID: false}
`).([]any)
	tests := map[string]struct {
		resource     string
		patterns     []any
		want         Status
		wantPath     string
		wantMessages []string
	}{
		"the first pattern passes": {
			resource: `{spec: {securityContext: {runAsNonRoot: true}, containers: [{name: a}]}}`,
			patterns: anyPattern, want: Pass,
		},
		"the second pattern passes": {
			resource: `{spec: {containers: [{name: a, securityContext: {runAsNonRoot: true}}]}}`,
			patterns: anyPattern, want: Pass,
		},
		"no pattern passes and every failure is listed": {
			resource: `{spec: {containers: [{name: a}]}}`,
			patterns: anyPattern, want: Fail, wantPath: "/spec/securityContext/",
			wantMessages: []string{"anyPattern[0] failed at path /spec/securityContext/", "anyPattern[1] failed at path /spec/containers/0/securityContext/"},
		},
		"every pattern skipped": {
			resource: `{spec: {containers: [{name: a}]}}`,
			patterns: conditional, want: Skip,
			wantMessages: []string{"anyPattern[0] skipped", "anyPattern[1] skipped"},
		},
		"a skip and a failure fail": {
			resource: `{spec: {hostIPC: true, hostPID: true}}`,
			patterns: conditional, want: Fail, wantPath: "/spec/hostPID/",
			wantMessages: []string{"anyPattern[1] failed at path /spec/hostPID/"},
		},
		"no patterns at all fail": {
			resource: `{}`, patterns: []any{}, want: Fail,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := ValidateAny(fromYAML(t, tc.resource), tc.patterns)
			if got.Status != tc.want {
				t.Fatalf("status = %v, want %v (%s)", got.Status, tc.want, got.Message)
			}
			if tc.wantPath != "" && got.Path != tc.wantPath {
				t.Errorf("path = %q, want %q", got.Path, tc.wantPath)
			}
			for _, m := range tc.wantMessages {
				if !strings.Contains(got.Message, m) {
					t.Errorf("message %q does not contain %q", got.Message, m)
				}
			}
			if got.Status != Pass && len(tc.patterns) > 0 && len(got.Patterns) != len(tc.patterns) {
				t.Errorf("got %d pattern results, want %d", len(got.Patterns), len(tc.patterns))
			}
		})
	}
}

func TestValidateIsDeterministic(t *testing.T) {
	// Several keys fail at once: the reported path must not depend on map
	// iteration order.
	res := fromYAML(t, `{spec: {a: 1, b: 2, c: 3, d: 4, e: 5, f: 6}}`)
	pat := fromYAML(t, `{spec: {a: 0, b: 0, c: 0, d: 0, e: 0, f: 0}}`)
	for range 50 {
		if got := Validate(res, pat); got.Path != "/spec/a/" {
			t.Fatalf("path = %q, want /spec/a/", got.Path)
		}
	}
}

// Skip messages are reported as they are: they read as Kyverno's, which
// quote the resource's value.
func TestValidateSkipMessagesAreKyvernos(t *testing.T) {
	const privEsc = `{spec: {
  =(initContainers): [{(image): "!*/foo:*.*.*", securityContext: {allowPrivilegeEscalation: false}}],
  =(containers): [{(image): "!*/foo:*.*.*", securityContext: {allowPrivilegeEscalation: false}}]}}`
	tests := map[string]struct {
		resource, pattern string
		want              Status
		wantMsg           string
	}{
		"a conditional anchor whose value does not match": {
			resource: `{spec: {type: NodePort}}`,
			pattern:  `{spec: {(type): ExternalName, externalName: "!localhost"}}`,
			want:     Skip, wantMsg: "conditional anchor mismatch: resource value 'NodePort' does not match 'ExternalName' at path /spec/type/",
		},
		"nested conditional anchors over a missing key": {
			resource: `{spec: {containers: [{name: a}]}}`,
			pattern:  `{(spec): {(volumes): [{(hostPath): {path: /var/run/docker.sock}}]}}`,
			want:     Skip, wantMsg: "conditional anchor mismatch: conditional anchor mismatch: conditional anchor key doesn't exist in the resource",
		},
		"nested conditional anchors over a list": {
			resource: `{spec: {volumes: [{hostPath: {path: /random/value}}]}}`,
			pattern:  `{(spec): {(volumes): [{(hostPath): {path: /var/run/docker.sock}}]}}`,
			want:     Skip, wantMsg: "conditional anchor mismatch: conditional anchor mismatch: conditional anchor mismatch: resource value '/random/value' does not match '/var/run/docker.sock' at path /spec/volumes/0/hostPath/path/",
		},
		"a global anchor whose value does not match": {
			resource: `{spec: {storageClassName: goldstorage}}`,
			pattern:  `{spec: {<(storageClassName): nfs-client}}`,
			want:     Skip, wantMsg: "global anchor mismatch: resource value 'goldstorage' does not match 'nfs-client' at path /spec/storageClassName/",
		},
		"a list whose only element the condition excludes is skipped with its reason": {
			resource: `{spec: {containers: [{image: "test/foo:1.2.3"}]}}`,
			pattern:  privEsc,
			want:     Skip, wantMsg: "conditional anchor mismatch: resource value 'test/foo:1.2.3' does not match '!*/foo:*.*.*' at path /spec/containers/0/image/",
		},
		"a list whose every element the condition excludes joins the reasons": {
			resource: `{spec: {containers: [{image: "a/foo:1.0.0"}, {image: "b/foo:2.0.0"}]}}`,
			pattern:  privEsc,
			want:     Skip, wantMsg: "conditional anchor mismatch: resource value 'a/foo:1.0.0' does not match '!*/foo:*.*.*' at path /spec/containers/0/image/; conditional anchor mismatch: resource value 'b/foo:2.0.0' does not match '!*/foo:*.*.*' at path /spec/containers/1/image/",
		},
		"an excluded init container beside containers that pass is a pass": {
			resource: `{spec: {initContainers: [{image: "test/foo:1.2.3"}], containers: [{image: "nginx", securityContext: {allowPrivilegeEscalation: false}}]}}`,
			pattern:  privEsc,
			want:     Pass,
		},
		"an excluded init container beside containers that fail is a failure": {
			resource: `{spec: {initContainers: [{image: "test/foo:1.2.3"}], containers: [{image: "nginx"}]}}`,
			pattern:  privEsc,
			want:     Fail,
		},
		"an excluded init container with nothing else applying is a skip": {
			resource: `{spec: {initContainers: [{image: "test/foo:1.2.3"}]}}`,
			pattern:  privEsc,
			want:     Skip, wantMsg: "conditional anchor mismatch: resource value 'test/foo:1.2.3' does not match '!*/foo:*.*.*' at path /spec/initContainers/0/image/",
		},
		"two anchored lists whose every element is excluded give every element's reason, in key order": {
			resource: `{spec: {initContainers: [{image: "a/foo:1.0.0"}], containers: [{image: "b/foo:2.0.0"}, {image: "c/foo:3.0.0"}]}}`,
			pattern:  privEsc,
			want:     Skip, wantMsg: "conditional anchor mismatch: resource value 'b/foo:2.0.0' does not match '!*/foo:*.*.*' at path /spec/containers/0/image/; conditional anchor mismatch: resource value 'c/foo:3.0.0' does not match '!*/foo:*.*.*' at path /spec/containers/1/image/; conditional anchor mismatch: resource value 'a/foo:1.0.0' does not match '!*/foo:*.*.*' at path /spec/initContainers/0/image/",
		},
		"whole numbers are quoted as integers": {
			resource: `{spec: {replicas: 1000000}}`,
			pattern:  `{spec: {(replicas): 1}}`,
			want:     Skip, wantMsg: "conditional anchor mismatch: resource value '1000000' does not match '1' at path /spec/replicas/",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := Validate(fromYAML(t, tc.resource), fromYAML(t, tc.pattern))
			if got.Status != tc.want {
				t.Fatalf("status = %v, want %v (%s)", got.Status, tc.want, got.Message)
			}
			if tc.wantMsg != "" && got.Message != tc.wantMsg {
				t.Errorf("message\n got %q\nwant %q", got.Message, tc.wantMsg)
			}
		})
	}
}

func TestStatusString(t *testing.T) {
	for s, want := range map[Status]string{Pass: "pass", Fail: "fail", Skip: "skip", Status(7): "Status(7)"} {
		if got := s.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int(s), got, want)
		}
	}
}
