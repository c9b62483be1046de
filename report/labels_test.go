package report

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestParseGVRLabel(t *testing.T) {
	tests := map[string]struct {
		in        string
		want      schema.GroupVersionResource
		ok        bool
		roundTrip bool // GVRLabel(want) == in
	}{
		"a core resource":                     {"pods.v1", schema.GroupVersionResource{Version: "v1", Resource: "pods"}, true, true},
		"a grouped resource":                  {"deployments.v1.apps", schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, true, true},
		"a group with dots":                   {"ingresses.v1.networking.k8s.io", schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "ingresses"}, true, true},
		"a beta version":                      {"widgets.v2beta1.example.com", schema.GroupVersionResource{Group: "example.com", Version: "v2beta1", Resource: "widgets"}, true, true},
		"an earlier tally core label":         {"v1.pods", schema.GroupVersionResource{Version: "v1", Resource: "pods"}, true, false},
		"an earlier tally grouped label":      {"networking.k8s.io.v1.ingresses", schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "ingresses"}, true, false},
		"empty":                               {"", schema.GroupVersionResource{}, false, false},
		"no version":                          {"pods", schema.GroupVersionResource{}, false, false},
		"a trailing dot":                      {"pods.v1.", schema.GroupVersionResource{}, false, false},
		"an empty component":                  {".v1.pods", schema.GroupVersionResource{}, false, false},
		"no component that is an API version": {"pods.apps.example", schema.GroupVersionResource{}, false, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, ok := ParseGVRLabel(tc.in)
			if ok != tc.ok || got != tc.want {
				t.Errorf("ParseGVRLabel(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
			}
			if tc.roundTrip && GVRLabel(got) != tc.in {
				t.Errorf("GVRLabel(%v) = %q, want %q back", got, GVRLabel(got), tc.in)
			}
		})
	}
}

func TestResourceTypeLabels(t *testing.T) {
	long := schema.GroupVersionResource{Group: "verylong" + strings.Repeat("x", 20) + "group.example.com", Version: "verylongversion", Resource: "verylongresources"}
	tests := map[string]struct {
		gvr  schema.GroupVersionResource
		kind string
		want map[string]string
	}{
		"a short GVR is one label": {schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "Pod",
			map[string]string{LabelResourceGVR: "pods.v1"}},
		"a GVR longer than a label value is split into group, version and kind": {long, "VeryLong",
			map[string]string{LabelResourceGroup: long.Group, LabelResourceVersion: "verylongversion", LabelResourceKind: "VeryLong"}},
		"a group that does not fit a label value is left out": {schema.GroupVersionResource{Group: strings.Repeat("g", 70) + ".example.com", Version: "v1", Resource: "things"}, "Thing",
			map[string]string{LabelResourceVersion: "v1", LabelResourceKind: "Thing"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			labels := map[string]string{LabelResourceGVR: "stale", "other": "kept"}
			ResourceTypeLabels(labels, tc.gvr, tc.kind)
			tc.want["other"] = "kept"
			if len(labels) != len(tc.want) {
				t.Fatalf("labels = %v, want %v", labels, tc.want)
			}
			for k, v := range tc.want {
				if labels[k] != v {
					t.Errorf("label %s = %q, want %q", k, labels[k], v)
				}
				if !validLabelValue(labels[k]) {
					t.Errorf("label %s = %q is not a valid label value", k, labels[k])
				}
			}
		})
	}
}

func TestReportOwner(t *testing.T) {
	uid := "159e193f-598a-4d7f-b453-965edd589ed7"
	kyvernoLabels := map[string]string{
		LabelResourceUID: uid, LabelResourceGroup: "", LabelResourceVersion: "v1", LabelResourceKind: "ConfigMap",
		LabelResourceGVR: "configmaps.v1", LabelSource: "admission",
	}
	kyvernoAnnotations := map[string]string{AnnotationResourceName: "passing", AnnotationResourceNamespace: "smoke"}
	tests := map[string]struct {
		meta   metav1.ObjectMeta
		owner  metav1.OwnerReference
		want   metav1.OwnerReference
		wantNS string
		ok     bool
	}{
		"spec.owner names the resource": {
			meta:  metav1.ObjectMeta{Namespace: "a", Labels: map[string]string{LabelResourceUID: uid}},
			owner: metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: "p", UID: "159e193f-598a-4d7f-b453-965edd589ed7"},
			want:  metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: "p", UID: "159e193f-598a-4d7f-b453-965edd589ed7"}, wantNS: "a", ok: true,
		},
		"an ownerReference names the resource": {
			meta: metav1.ObjectMeta{Namespace: "a", OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "d", UID: "u1"}}},
			want: metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "d", UID: "u1"}, wantNS: "a", ok: true,
		},
		"a Kyverno 1.19 EphemeralReport: empty owner, labels and annotations": {
			meta: metav1.ObjectMeta{Namespace: "smoke", Labels: kyvernoLabels, Annotations: kyvernoAnnotations},
			want: metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "passing", UID: "159e193f-598a-4d7f-b453-965edd589ed7"}, wantNS: "smoke", ok: true,
		},
		"a grouped resource from labels": {
			meta: metav1.ObjectMeta{Namespace: "x", Labels: map[string]string{LabelResourceUID: "u2", LabelResourceGroup: "apps", LabelResourceVersion: "v1", LabelResourceKind: "Deployment"},
				Annotations: map[string]string{AnnotationResourceName: "d"}},
			want: metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "d", UID: "u2"}, wantNS: "x", ok: true,
		},
		"labels without the resource's name name no resource": {
			meta: metav1.ObjectMeta{Namespace: "smoke", Labels: kyvernoLabels},
			want: metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", UID: "159e193f-598a-4d7f-b453-965edd589ed7"}, wantNS: "smoke", ok: false,
		},
		"nothing names a resource": {meta: metav1.ObjectMeta{Namespace: "smoke"}, wantNS: "smoke", ok: false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, ns, ok := ReportOwner(&tc.meta, tc.owner)
			if got != tc.want || ns != tc.wantNS || ok != tc.ok {
				t.Errorf("ReportOwner = %+v, %q, %v; want %+v, %q, %v", got, ns, ok, tc.want, tc.wantNS, tc.ok)
			}
		})
	}
}
