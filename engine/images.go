package engine

import "strings"

// imagesOf builds the "images" variable: for each container list of the pod
// spec (of a Pod or of a pod controller's template), the parsed image of every
// container by container name.
func imagesOf(obj map[string]any) map[string]any {
	spec := podSpecOf(obj)
	if spec == nil {
		return nil
	}
	out := map[string]any{}
	for _, list := range [...]string{"containers", "initContainers", "ephemeralContainers"} {
		containers, _ := spec[list].([]any)
		if len(containers) == 0 {
			continue
		}
		byName := make(map[string]any, len(containers))
		for _, c := range containers {
			cm, _ := c.(map[string]any)
			name, _ := cm["name"].(string)
			image, _ := cm["image"].(string)
			if image == "" {
				continue
			}
			byName[name] = parseImage(image)
		}
		out[list] = byName
	}
	if len(out) == 0 {
		return nil
	}
	return out
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
	registry := "docker.io"
	path := ref
	if i := strings.Index(ref, "/"); i >= 0 {
		first := ref[:i]
		if strings.ContainsAny(first, ".:") || first == "localhost" {
			registry = first
			path = ref[i+1:]
		}
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
