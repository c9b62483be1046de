package watch

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// NewRawClient builds a REST client for one API group version that sends
// JSON bodies and reads the API server's answers as bytes, decoding them only
// on an error status: report writers use it where the dynamic client would
// turn every answer (the whole object back) into an unstructured object only
// for the writer to drop it.
func NewRawClient(cfg *rest.Config, gv schema.GroupVersion) (*rest.RESTClient, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &gv
	c.APIPath = "/apis"
	c.NegotiatedSerializer = clientscheme.Codecs.WithoutConversion()
	c.ContentType = runtime.ContentTypeJSON
	return rest.RESTClientFor(c)
}
