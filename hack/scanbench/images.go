package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/tally-dev/tally/engine/imageverify/sigverify/sigtest"
)

// imageFixture is a registry of the bench's own holding n signed images.
type imageFixture struct {
	registry *sigtest.Registry
	key      *sigtest.Key
	n        int
	// ivpol verifies them with an ImageValidatingPolicy (the Pods name
	// them by digest) instead of a verifyImages rule.
	ivpol   bool
	digests []string
}

func startImages(n int, ivpol bool) (*imageFixture, error) {
	reg, err := sigtest.Start("127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	key, err := sigtest.NewKey()
	if err != nil {
		return nil, err
	}
	f := &imageFixture{registry: reg, key: key, n: n, ivpol: ivpol}
	for i := range n {
		d, err := reg.Push(fmt.Sprintf("bench/app-%02d", i), "1.0")
		if err != nil {
			return nil, err
		}
		if err := key.Sign(d, nil); err != nil {
			return nil, err
		}
		f.digests = append(f.digests, d.DigestStr())
	}
	return f, nil
}

// image is the app image of Pod i.
func (f *imageFixture) image(i int) string {
	if f.ivpol {
		return fmt.Sprintf("%s/bench/app-%02d@%s", f.registry.Host, i%f.n, f.digests[i%f.n])
	}
	return fmt.Sprintf("%s/bench/app-%02d:1.0", f.registry.Host, i%f.n)
}

var gvrImageValidatingPolicy = schema.GroupVersionResource{Group: "policies.kyverno.io", Version: "v1", Resource: "imagevalidatingpolicies"}

func (f *imageFixture) installPolicy(ctx context.Context, dyn dynamic.Interface) error {
	doc, gvr := f.key.Policy("bench-verify-images", f.registry.Host+"/*"), gvrClusterPolicy
	if f.ivpol {
		doc, gvr = f.key.ImageValidatingPolicy("bench-verify-images", f.registry.Host+"/*"), gvrImageValidatingPolicy
	}
	var u unstructured.Unstructured
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		return err
	}
	_, err := dyn.Resource(gvr).Create(ctx, &u, metav1.CreateOptions{})
	return err
}

// countResults prints the results of the verifyImages rule the scanner
// holds (its tally_scan_results gauge), by result.
func (f *imageFixture) countResults(m *metricsClient) error {
	resp, err := http.Get(m.Base + "/metrics")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	counts := map[string]string{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "tally_scan_results{") || !strings.Contains(line, `policy="bench-verify-images"`) {
			continue
		}
		_, rest, _ := strings.Cut(line, `result="`)
		result, _, _ := strings.Cut(rest, `"`)
		fields := strings.Fields(line)
		counts[result] = fields[len(fields)-1]
	}
	fmt.Printf("  image verification results: %v\n", counts)
	return sc.Err()
}
