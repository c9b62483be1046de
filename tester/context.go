package tester

import (
	"fmt"

	"github.com/tally-dev/tally/controllers/data"
)

// ReadContext reads what policies may read of the cluster offline: context
// files (cli.kyverno.io Context: spec.resources and spec.images; the `context:` of a test,
// `--context-file` of apply and scan), ClusterResource files
// (spec.resources) and plain manifests (a test's clusterResources). It
// returns nil when no file is given: then every read is an error that says
// so.
func ReadContext(files ...string) (*data.Offline, error) {
	if len(files) == 0 {
		return nil, nil
	}
	var objs, images []map[string]any
	for _, f := range files {
		docs, err := ReadManifests(f)
		if err != nil {
			return nil, err
		}
		for _, d := range docs {
			kind, _ := d.Object["kind"].(string)
			apiVersion, _ := d.Object["apiVersion"].(string)
			if (kind == "Context" || kind == "ClusterResource") && apiVersion == "cli.kyverno.io/v1alpha1" {
				spec, _ := d.Object["spec"].(map[string]any)
				list, ok := spec["resources"].([]any)
				if spec["resources"] != nil && !ok {
					return nil, fmt.Errorf("%s: %s: spec.resources must be a list of objects", f, kind)
				}
				for i, r := range list {
					obj, ok := r.(map[string]any)
					if !ok {
						return nil, fmt.Errorf("%s: %s: spec.resources[%d] is not an object", f, kind, i)
					}
					objs = append(objs, obj)
				}
				imgs, _ := spec["images"].([]any)
				for i, r := range imgs {
					img, ok := r.(map[string]any)
					if !ok {
						return nil, fmt.Errorf("%s: %s: spec.images[%d] is not an object", f, kind, i)
					}
					images = append(images, img)
				}
				continue
			}
			objs = append(objs, d.Object)
		}
	}
	o, err := data.NewOffline(objs)
	if err == nil {
		err = o.AddImages(images)
	}
	if err != nil {
		return nil, fmt.Errorf("%v: %w", files, err)
	}
	return o, nil
}
