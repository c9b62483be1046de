package watch

import (
	"bytes"
	"context"
	"encoding/json"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// Writer writes the objects a controller owns (its reports): created whole
// when the controller has not written them, else the fields it owns
// replaced by a JSON patch. Both cost the API server far less than
// server-side apply, which computes field ownership on every write. An
// object created behind the controller's back is patched, one deleted
// behind it created again.
type Writer struct {
	Client dynamic.Interface
	// Raw, when set (NewRawClient, for the objects' group version), sends
	// the writes without decoding the API server's answers; the dynamic
	// client is used otherwise (as with fakes in unit tests).
	Raw          *rest.RESTClient
	FieldManager string
}

// PatchOp is one operation of a JSON patch (RFC 6902).
type PatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// Set sets path to value: "add" replaces a member that exists and adds one
// that does not.
func Set(path string, value any) PatchOp { return PatchOp{Op: "add", Path: path, Value: value} }

// Write writes one object: patched with ops when the controller knows it
// exists, else created from body (called only then). created says which
// write succeeded; rv is the object's resourceVersion after it (read from
// the answer's metadata alone), so that the controller can tell its own
// writes from others' in a watch.
func (w *Writer) Write(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string, exists bool,
	body func() ([]byte, error), ops []PatchOp) (rv string, created bool, err error) {
	if exists {
		rv, err := w.patch(ctx, gvr, namespace, name, ops)
		if err != nil && !apierrors.IsNotFound(err) && w.missing(ctx, gvr, namespace, name) {
			// A PATCH of a missing object may fail otherwise than with "not
			// found" (reports-server answers 500): read before trying the
			// patch again, or the object is never created again.
			err = apierrors.NewNotFound(gvr.GroupResource(), name)
		}
		if !apierrors.IsNotFound(err) {
			return rv, false, err
		}
	}
	data, err := body()
	if err != nil {
		return "", false, err
	}
	rv, err = w.create(ctx, gvr, namespace, data)
	if apierrors.IsAlreadyExists(err) {
		rv, err = w.patch(ctx, gvr, namespace, name, ops)
		return rv, false, err
	}
	return rv, err == nil, err
}

// resourceVersionOf reads metadata.resourceVersion of an object's JSON,
// decoding nothing past metadata: the API server writes apiVersion, kind
// and metadata first, before the report's results. "" when it cannot tell.
func resourceVersionOf(raw []byte) string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return ""
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return ""
		}
		if key != "metadata" {
			var skip json.RawMessage
			if dec.Decode(&skip) != nil {
				return ""
			}
			continue
		}
		var m struct {
			ResourceVersion string `json:"resourceVersion"`
		}
		if dec.Decode(&m) != nil {
			return ""
		}
		return m.ResourceVersion
	}
	return ""
}

// missing says whether a GET answers that the object does not exist (any
// other answer: it may).
func (w *Writer) missing(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string) bool {
	var err error
	if w.Raw != nil {
		err = w.Raw.Get().NamespaceIfScoped(namespace, namespace != "").Resource(gvr.Resource).Name(name).Do(ctx).Error()
	} else {
		_, err = w.Client.Resource(gvr).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	}
	return apierrors.IsNotFound(err)
}

func (w *Writer) create(ctx context.Context, gvr schema.GroupVersionResource, namespace string, body []byte) (string, error) {
	if w.Raw != nil {
		raw, err := w.Raw.Post().NamespaceIfScoped(namespace, namespace != "").Resource(gvr.Resource).
			Param("fieldManager", w.FieldManager).Body(body).Do(ctx).Raw()
		if err != nil {
			return "", err
		}
		return resourceVersionOf(raw), nil
	}
	var obj map[string]any
	if err := json.Unmarshal(body, &obj); err != nil {
		return "", err
	}
	out, err := w.Client.Resource(gvr).Namespace(namespace).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{FieldManager: w.FieldManager})
	if err != nil {
		return "", err
	}
	return out.GetResourceVersion(), nil
}

func (w *Writer) patch(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string, ops []PatchOp) (string, error) {
	data, err := json.Marshal(ops)
	if err != nil {
		return "", err
	}
	if w.Raw != nil {
		raw, err := w.Raw.Patch(types.JSONPatchType).NamespaceIfScoped(namespace, namespace != "").Resource(gvr.Resource).Name(name).
			Param("fieldManager", w.FieldManager).Body(data).Do(ctx).Raw()
		if err != nil {
			return "", err
		}
		return resourceVersionOf(raw), nil
	}
	out, err := w.Client.Resource(gvr).Namespace(namespace).Patch(ctx, name, types.JSONPatchType, data, metav1.PatchOptions{FieldManager: w.FieldManager})
	if err != nil {
		return "", err
	}
	return out.GetResourceVersion(), nil
}
