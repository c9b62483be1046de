package kind

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// RenderChart renders a Helm chart with `go tool helm template` (helm is
// pinned in go.mod) into namespace, with --set values, and returns its objects.
func RenderChart(ctx context.Context, root, chart, namespace string, set ...string) ([]*unstructured.Unstructured, error) {
	args := []string{"tool", "helm", "template", "tally", chart, "--namespace", namespace}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("helm template %s %v: %w: %s", chart, set, err, stderr.String())
	}
	return decodeObjects(stdout.Bytes())
}

// decodeObjects reads a stream of YAML documents (empty ones skipped).
func decodeObjects(data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if len(obj) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: obj})
	}
}
