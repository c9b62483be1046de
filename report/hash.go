package report

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"strconv"
)

// lastApplied is kubectl's copy of the applied manifest: it changes with
// every `kubectl apply` and says nothing a policy reacts to beyond what the
// object itself holds.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// ContentHash hashes what a policy can meaningfully react to: everything but
// status and the metadata that changes on every write (resourceVersion,
// generation, managedFields, kubectl's last-applied annotation). The scanner
// and the admission bridge label their reports with it
// (audit.kyverno.io/resource.hash), so the merger can tell whether both
// describe the same content, and whether an admission result was computed
// on the content the resource has now.
//
// It is the first 64 bits of a SHA-256: a second object with the hash of a
// given one cannot be made (an admission review forged with made-up content
// never passes for the stored object), where a non-cryptographic hash would
// let one be constructed.
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
			case "annotations":
				ann, _ := v.(map[string]any)
				if _, ok := ann[lastApplied]; !ok {
					m[k] = v
					break
				}
				kept := make(map[string]any, len(ann))
				for ak, av := range ann {
					if ak != lastApplied {
						kept[ak] = av
					}
				}
				if len(kept) > 0 {
					m[k] = kept
				}
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
	sum := sha256.Sum256(data)
	return binary.BigEndian.Uint64(sum[:8]), nil
}

// AdmissionHash is the content hash an admission result is bound to
// (PropertyResourceHash): ContentHash without the fields that change
// through subresources, which no review of the resource itself carries:
// a Pod's spec.nodeName (pods/binding, set by the scheduler on every Pod)
// and the replicas of the built-in kinds with a scale subresource (what a
// HorizontalPodAutoscaler or `kubectl scale` writes). Without this, every
// scheduled Pod and scaled Deployment would lose the results of its own
// admission. A review that differs from another only in those fields lands
// in the same section, where the newest result wins.
func AdmissionHash(obj map[string]any) (uint64, error) {
	_, admission, err := Hashes(obj)
	return admission, err
}

// Hashes returns an object's content hash for change detection (content:
// every field ContentHash covers) and its AdmissionHash, computing the
// object's encoding once. Where the object has none of the fields
// AdmissionHash leaves out, both are its ContentHash; otherwise content
// mixes those fields' values into the admission hash.
func Hashes(obj map[string]any) (content, admission uint64, err error) {
	kind, _ := obj["kind"].(string)
	var drop string
	switch kind {
	case "Pod":
		drop = "nodeName"
	case "Deployment", "ReplicaSet", "StatefulSet", "ReplicationController":
		drop = "replicas"
	}
	spec, ok := obj["spec"].(map[string]any)
	dropped, has := spec[drop]
	if drop == "" || !ok || !has {
		h, err := ContentHash(obj)
		return h, h, err
	}
	view := make(map[string]any, len(obj))
	for k, v := range obj {
		view[k] = v
	}
	kept := make(map[string]any, len(spec))
	for k, v := range spec {
		if k != drop {
			kept[k] = v
		}
	}
	view["spec"] = kept
	if admission, err = ContentHash(view); err != nil {
		return 0, 0, err
	}
	value, err := json.Marshal(dropped)
	if err != nil {
		return 0, 0, err
	}
	var buf [8]byte
	binary.BigEndian.PutUint64(buf[:], admission)
	sum := sha256.Sum256(append(append(buf[:], drop...), value...))
	return binary.BigEndian.Uint64(sum[:8]), admission, nil
}

// HashText is a content or admission hash as reports carry it (the
// LabelResourceHash label's value, the hand-over's and the verifier's
// comparisons): lower-case hexadecimal, no padding. The one place its
// format is written.
func HashText(h uint64) string { return strconv.FormatUint(h, 16) }
