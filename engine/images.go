package engine

import (
	"fmt"
	"strings"

	"github.com/distribution/reference"
)

// imagesOf builds the "images" variable: for each container list of the pod
// spec (of a Pod or of a pod controller's template), the parsed image of every
// container by container name. An image that is not a valid reference
// (upper-case repository, "*") makes the whole variable fail, as Kyverno's
// does: the error says which image and why.
func imagesOf(obj map[string]any) (map[string]any, error) {
	spec := podSpecOf(obj)
	if spec == nil {
		return nil, nil
	}
	out := map[string]any{}
	// Kyverno's order (pkg/utils/api/image.go): the first error wins.
	for _, list := range [...]string{"initContainers", "containers", "ephemeralContainers"} {
		containers, _ := spec[list].([]any)
		if len(containers) == 0 {
			continue
		}
		byName := make(map[string]any, len(containers))
		for _, c := range containers {
			cm, _ := c.(map[string]any)
			name, ok := cm["name"].(string)
			if !ok {
				// Kyverno keys the images by container name, and reads the
				// name first: a container without one fails the variable
				// (whether it has an image or not), for the rules that read
				// it (issue 56).
				return nil, fmt.Errorf("invalid key")
			}
			// A container without an image has none to list; an empty one
			// is an invalid reference, as in Kyverno (issue 40).
			image, ok := cm["image"].(string)
			if !ok {
				continue
			}
			if err := checkImage(image); err != nil {
				return nil, err
			}
			byName[name] = parseImage(image)
		}
		out[list] = byName
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// defaultRegistry is the registry of an image reference that names none.
const defaultRegistry = "docker.io"

// checkImage reports an image that is not a valid reference once given the
// default registry, in the words of Kyverno's images variable ("invalid
// image 'X' (bad image: docker.io/X, defaultRegistry: docker.io,
// enableDefaultRegistryMutation: true: repository name must be lowercase)").
func checkImage(image string) error {
	full := image
	if registryOf(image) == "" {
		full = defaultRegistry + "/" + image
	}
	if _, err := reference.Parse(full); err != nil {
		return fmt.Errorf("invalid image '%s' (bad image: %s, defaultRegistry: %s, enableDefaultRegistryMutation: true: %w)",
			image, full, defaultRegistry, err)
	}
	return nil
}

// registryOf returns the registry an image reference names, or "" when it
// names none: by the Docker convention, the part before the first "/" is a
// registry when it has a "." or a ":", is "localhost", or has an upper-case
// letter (a repository path never has one).
func registryOf(ref string) string {
	first, _, found := strings.Cut(ref, "/")
	if !found {
		return ""
	}
	if strings.ContainsAny(first, ".:") || first == "localhost" || strings.ToLower(first) != first {
		return first
	}
	return ""
}

// podSpecOf returns the pod spec of a Pod, a pod controller or a CronJob.
func podSpecOf(obj map[string]any) map[string]any {
	if obj == nil {
		return nil
	}
	spec, _ := obj["spec"].(map[string]any)
	kind, _ := obj["kind"].(string)
	switch kind {
	case "Pod":
		return spec
	case "CronJob":
		jt, _ := spec["jobTemplate"].(map[string]any)
		js, _ := jt["spec"].(map[string]any)
		spec = js
		fallthrough
	default:
		t, _ := spec["template"].(map[string]any)
		ts, _ := t["spec"].(map[string]any)
		return ts
	}
}

// parseImage splits an image reference the way Kyverno's images variable
// presents it: registry (docker.io when none is given), path, name, tag
// (latest when neither tag nor digest is given), digest and the full reference.
func parseImage(image string) map[string]any {
	ref := image
	digest := ""
	if i := strings.Index(ref, "@"); i >= 0 {
		digest = ref[i+1:]
		ref = ref[:i]
	}
	tag := ""
	if i := strings.LastIndex(ref, ":"); i >= 0 && !strings.Contains(ref[i:], "/") {
		tag = ref[i+1:]
		ref = ref[:i]
	}
	registry, path := defaultRegistry, ref
	if r := registryOf(ref); r != "" {
		registry, path = r, ref[len(r)+1:]
	}
	if tag == "" && digest == "" {
		tag = "latest"
	}
	name := path
	if i := strings.LastIndex(path, "/"); i >= 0 {
		name = path[i+1:]
	}
	out := map[string]any{
		"registry": registry,
		"path":     path,
		"name":     name,
		"tag":      tag,
	}
	full := registry + "/" + path
	if tag != "" {
		full += ":" + tag
		out["referenceWithTag"] = full
	}
	if digest != "" {
		out["digest"] = digest
		full += "@" + digest
	}
	out["reference"] = full
	return out
}

func namespaceOf(objs ...map[string]any) string {
	for _, o := range objs {
		if md, ok := o["metadata"].(map[string]any); ok {
			if ns, ok := md["namespace"].(string); ok && ns != "" {
				return ns
			}
		}
	}
	return ""
}
