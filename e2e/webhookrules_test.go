package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/e2e-framework/klient/wait"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/tally-dev/tally/controllers/admission"
)

// requests is the number of admission reviews the bridge answered.
func (rb *runningBridge) requests(t *testing.T) float64 {
	t.Helper()
	return sumMetric(t, rb.reg, "tally_admission_requests_total", nil)
}

// The webhook configuration's rules follow the policies: with one policy
// on Pods, the API server sends tally nothing while 1,000 Lease renewals
// and 100 Secret writes happen in a namespace the webhook covers, and still
// sends the Pods.
func TestWebhookRulesFollowThePolicies(t *testing.T) {
	const (
		ns            = "adm-rules"
		selectorLabel = "tally.dev/rules-e2e"
		configName    = "rules-tally"
	)
	var (
		bridge *runningBridge
		kube   *kubernetes.Clientset
		policy = admissionPolicy("adm-rules-pods", "Audit", "team")
	)
	f := features.New("webhook rules from the policies").
		Setup(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			r := cfg.Client().Resources()
			if err := r.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{selectorLabel: "on"}}}); err != nil {
				t.Fatal(err)
			}
			if err := r.Create(ctx, policy); err != nil {
				t.Fatal(err)
			}
			bridge = startBridge(t, cfg.Client().RESTConfig(), "default", configName, func(o *admission.Options) { o.ManageRules = true })
			// Created sending everything: tally narrows it.
			vwc := webhookConfiguration(configName, "https://"+bridge.bridge.Addr()+"/validate", selectorLabel)
			vwc.Webhooks[0].Rules = []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*/*"}, Scope: ptr.To(admissionregistrationv1.AllScopes)},
			}}
			if err := r.Create(ctx, vwc); err != nil {
				t.Fatal(err)
			}
			var err error
			if kube, err = kubernetes.NewForConfig(cfg.Client().RESTConfig()); err != nil {
				t.Fatal(err)
			}
			return ctx
		}).
		Assess("the rules name Pods and the policy kinds only", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			var got []admissionregistrationv1.RuleWithOperations
			err := wait.For(func(ctx context.Context) (bool, error) {
				var vwc admissionregistrationv1.ValidatingWebhookConfiguration
				if err := cfg.Client().Resources().Get(ctx, configName, "", &vwc); err != nil {
					return false, err
				}
				got = vwc.Webhooks[0].Rules
				return len(got) == 2 && fmt.Sprint(got[0].APIGroups, got[0].Resources) == "[] [pods]", nil
			}, wait.WithTimeout(30*time.Second), wait.WithInterval(100*time.Millisecond))
			if err != nil {
				t.Fatalf("rules = %+v, want Pods and the policy kinds: %v", got, err)
			}
			if fmt.Sprint(got[1].APIGroups, got[1].Resources) != "[kyverno.io] [clusterpolicies policies]" {
				t.Errorf("second rule = %+v, want kyverno.io policies (checked before they are stored)", got[1])
			}
			// The scanner marks a policy Ready once the rules send its
			// requests, and a moment more (the API server applies them
			// from its watch).
			err = wait.For(func(context.Context) (bool, error) {
				return bridge.bridge.WebhookConfigured(policy.GetName(), policy.GetGeneration()), nil
			}, wait.WithTimeout(30*time.Second), wait.WithInterval(100*time.Millisecond))
			if err != nil {
				t.Errorf("WebhookConfigured(%s, %d) never true: %v", policy.GetName(), policy.GetGeneration(), err)
			}
			if bridge.bridge.WebhookConfigured(policy.GetName(), policy.GetGeneration()+1) || bridge.bridge.WebhookConfigured("no-such-policy", 1) {
				t.Error("WebhookConfigured is true for a generation or a policy the rules were not computed from")
			}
			// The API server picks the narrowed rules up asynchronously: wait
			// until a Secret no longer reaches the webhook while a Pod does.
			secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns}}
			err = wait.For(func(ctx context.Context) (bool, error) {
				before := bridge.requests(t)
				if _, err := kube.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
					return false, err
				}
				if _, err := kube.CoreV1().Pods(ns).Create(ctx, newPod(ns, "probe", map[string]string{"team": "a"}), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
					return false, err
				}
				return bridge.requests(t)-before == 1, nil
			}, wait.WithTimeout(30*time.Second), wait.WithInterval(200*time.Millisecond))
			if err != nil {
				t.Fatalf("the API server never sent the Pod without the Secret: %v", err)
			}
			return ctx
		}).
		Assess("1,000 Lease renewals and 100 Secret writes: zero webhook calls", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			before := bridge.requests(t)
			leases := kube.CoordinationV1().Leases(ns)
			for i := range 10 {
				lease, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("lease-%d", i)},
					Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("e2e")}}, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				for range 100 {
					lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
					if lease, err = leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
						t.Fatal(err)
					}
				}
			}
			for i := range 100 {
				if _, err := kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s-%d", i)}}, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			if calls := bridge.requests(t) - before; calls != 0 {
				t.Errorf("%v webhook calls for Leases and Secrets no policy matches, want 0", calls)
			}
			t.Logf("1,000 Lease renewals and 100 Secret writes: %v webhook calls", bridge.requests(t)-before)
			if _, err := kube.CoreV1().Pods(ns).Create(ctx, newPod(ns, "web", map[string]string{"team": "a"}), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if calls := bridge.requests(t) - before; calls != 1 {
				t.Errorf("%v webhook calls after a Pod, want 1", calls)
			}
			return ctx
		}).
		Assess("a policy on another kind adds it", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			cm := admissionPolicy("adm-rules-cm", "Audit", "team")
			cm.Spec.Rules[0].Match.Any[0].Resources.Kinds = []string{"ConfigMap"}
			if err := cfg.Client().Resources().Create(ctx, cm); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cfg.Client().Resources().Delete(ctx, cm) }()
			err := wait.For(func(ctx context.Context) (bool, error) {
				var vwc admissionregistrationv1.ValidatingWebhookConfiguration
				if err := cfg.Client().Resources().Get(ctx, configName, "", &vwc); err != nil {
					return false, err
				}
				return fmt.Sprint(vwc.Webhooks[0].Rules[0].Resources) == "[configmaps pods]", nil
			}, wait.WithTimeout(30*time.Second), wait.WithInterval(100*time.Millisecond))
			if err != nil {
				t.Errorf("ConfigMaps were not added to the rules: %v", err)
			}
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			r := cfg.Client().Resources()
			_ = r.Delete(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: configName}})
			if bridge != nil {
				bridge.stop(t)
			}
			_ = r.Delete(ctx, policy)
			_ = r.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
			return ctx
		}).Feature()
	testenv.Test(t, f)
}
