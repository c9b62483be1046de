package e2e

import (
	"context"
	"sync/atomic"

	"os"
	"path/filepath"
	"strings"
	"testing"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/tally-dev/tally/controllers/data"
	"github.com/tally-dev/tally/internal/corpus"
	"github.com/tally-dev/tally/tester"
)

// libraryContextTests are the tests of the corpus's policy library whose
// classic validate policies read the cluster (configMap, apiCall), each
// with the objects (e2e/testdata/library-context/<test>.yaml) that hold
// what its values file gives: run live, the policies must read those
// objects and give the results the test expects. Two of the eleven are
// not here: ensure-production-matches-staging expects no result, and the
// values of restrict-secrets-by-label give one Secret three different
// labels (one per rule), which no cluster can hold.
var libraryContextTests = []string{
	"kasten/kasten-hourly-rpo",
	"other/advanced-restrict-image-registries",
	"other/exclude-namespaces-dynamically",
	"other/require-pdb",
	"other/require-unique-external-dns",
	"other/require-unique-uid-per-workload",
	"other/restrict-ingress-host",
	"other/restrict-pod-count-per-node",
	"other/restrict-service-account",
}

// The policy library's policies that read the cluster give, read live
// through the scanner's data loader on the real API server, the results
// their kyverno-test.yaml expects (the values naming their context entries
// dropped, so that every entry is loaded from the cluster).
func TestPolicyLibraryContextPoliciesReadTheCluster(t *testing.T) {
	f := features.New("policy library context policies, live").
		Assess("each test's expectations hold with its data read from the cluster", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			rc := cfg.Client().RESTConfig()
			dyn, err := dynamic.NewForConfig(rc)
			if err != nil {
				t.Fatal(err)
			}
			kube, err := kubernetes.NewForConfig(rc)
			if err != nil {
				t.Fatal(err)
			}
			mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(kube.Discovery()))
			for _, test := range libraryContextTests {
				applyFixtures(ctx, t, dyn, mapper, filepath.Join("testdata", "library-context", filepath.Base(test)+".yaml"))
			}
			reg := prometheus.NewRegistry()
			loader := data.New(dyn, kube.Discovery().RESTClient(), data.Options{Registry: reg})
			lctx, cancel := context.WithCancel(ctx)
			defer cancel()
			go func() { _ = loader.Run(lctx) }()
			total, held := 0, 0
			for _, test := range libraryContextTests {
				file := corpus.Path(t, "policy-library", test, ".kyverno-test", tester.TestFileName)
				counted := &countingLoader{Loader: loader}
				outcomes, err := tester.RunFileLive(ctx, file, &tester.Live{Loader: counted, Data: loader})
				if err != nil {
					t.Errorf("%s: %v", test, err)
					continue
				}
				if len(outcomes) == 0 {
					t.Errorf("%s: no expectation was checked", test)
				}
				for _, o := range outcomes {
					total++
					if o.Status == tester.Passed {
						held++
					} else {
						t.Errorf("%s: %s/%s on %s: expected %s, got %s (%s)", test, o.Policy, o.Rule, o.Resource, o.Expected, o.Got, o.Reason)
					}
				}
				if counted.loads.Load() == 0 {
					t.Errorf("%s: the policies read nothing from the cluster", test)
				}
			}
			t.Logf("%d of %d expectations of %d tests held with their data read live (%.0f API requests for data)", held, total, len(libraryContextTests), dataRequests(t, reg))
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

// countingLoader counts the context entries loaded.
type countingLoader struct {
	*data.Loader
	loads atomic.Int64
}

func (c *countingLoader) Load(ctx context.Context, policy string, entry kyvernov1.ContextEntry, d map[string]any) (any, error) {
	c.loads.Add(1)
	return c.Loader.Load(ctx, policy, entry, d)
}

// applyFixtures server-side applies every object of a file.
func applyFixtures(ctx context.Context, t *testing.T, dyn dynamic.Interface, mapper meta.RESTMapper, file string) {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(raw), "\n---") {
		var obj map[string]any
		if err := sigsyaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if len(obj) == 0 {
			continue
		}
		apiVersion, _ := obj["apiVersion"].(string)
		kind, _ := obj["kind"].(string)
		md, _ := obj["metadata"].(map[string]any)
		name, _ := md["name"].(string)
		ns, _ := md["namespace"].(string)
		gv, err := schema.ParseGroupVersion(apiVersion)
		if err != nil {
			t.Fatal(err)
		}
		m, err := mapper.RESTMapping(gv.WithKind(kind).GroupKind(), gv.Version)
		if err != nil {
			t.Fatalf("%s: %s: %v", file, kind, err)
		}
		body, err := sigsyaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		var r dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if ns != "" {
			r = dyn.Resource(m.Resource).Namespace(ns)
		}
		force := true
		if _, err := r.Patch(ctx, name, types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: "e2e-fixtures", Force: &force}); err != nil {
			t.Fatalf("%s: apply %s %s: %v", file, kind, name, err)
		}
	}
}

// dataRequests sums tally_data_requests_total.
func dataRequests(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "tally_data_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}
