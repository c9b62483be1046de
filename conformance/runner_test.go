package conformance

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// A case run again at once finds its namespace of the run before still
// terminating: the runner waits until it is gone, and no longer.
func TestWaitNamespaceGone(t *testing.T) {
	terminating := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "conf", DeletionTimestamp: &metav1.Time{Time: time.Now()}, Finalizers: []string{"kubernetes"}},
		Status: corev1.NamespaceStatus{Phase: corev1.NamespaceTerminating}}
	live := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "conf"}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive}}
	tests := map[string]struct {
		ns       *corev1.Namespace // what each get finds...
		goneFrom int32             // ...until this get (0: never gone)
		timeout  time.Duration
		wantErr  string
		wantGets int32 // at least
	}{
		"gone already":                    {nil, 1, time.Second, "", 1},
		"terminating, gone after a while": {terminating, 4, 10 * time.Second, "", 4},
		"there and not terminating: left for create to say so": {live, 0, time.Second, "", 1},
		"terminating for good":                                 {terminating, 0, time.Second, "is not gone after 1s", 2},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			kube := fake.NewClientset()
			var gets atomic.Int32
			kube.PrependReactor("get", "namespaces", func(k8stesting.Action) (bool, runtime.Object, error) {
				n := gets.Add(1)
				if tc.ns == nil || tc.goneFrom > 0 && n >= tc.goneFrom {
					return true, nil, apierrors.NewNotFound(corev1.Resource("namespaces"), "conf")
				}
				return true, tc.ns.DeepCopy(), nil
			})
			x := &run{Runner: &Runner{Timeout: tc.timeout, kube: kube}}
			err := x.waitNamespaceGone(context.Background(), "conf")
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("error %v, want none", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
			}
			if got := gets.Load(); got < tc.wantGets {
				t.Errorf("%d gets, want at least %d", got, tc.wantGets)
			}
		})
	}
}
