package report

import (
	"encoding/json"
	"hash/fnv"
)

// ContentHash hashes what a policy can meaningfully react to: everything but
// status and the metadata fields that change on every write. The scanner and
// the admission bridge label their reports with it
// (audit.kyverno.io/resource.hash), so the merger can tell whether both
// describe the same content.
func ContentHash(obj map[string]any) (uint64, error) {
	view := make(map[string]any, len(obj))
	for k, v := range obj {
		if k != "status" {
			view[k] = v
		}
	}
	if md, ok := obj["metadata"].(map[string]any); ok {
		m := make(map[string]any, len(md))
		for k, v := range md {
			switch k {
			case "resourceVersion", "generation", "managedFields":
			default:
				m[k] = v
			}
		}
		view["metadata"] = m
	}
	data, err := json.Marshal(view) // map keys are sorted: a stable encoding
	if err != nil {
		return 0, err
	}
	h := fnv.New64a()
	_, _ = h.Write(data)
	return h.Sum64(), nil
}
