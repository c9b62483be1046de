package data

import (
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
)

// imageRegistry entries read a registry (one served in process here) only
// when registry access is on: the manifest, config and digest of the
// image, each digest read once; off, the error names the image and the
// flag; a missing image is an error naming it.
func TestImageRegistryEntries(t *testing.T) {
	var manifestReads atomic.Int32
	reg := ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/manifests/sha256:") && r.Method == http.MethodGet {
			manifestReads.Add(1)
		}
		reg.ServeHTTP(w, r)
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	img, err := random.Image(64, 1)
	if err != nil {
		t.Fatal(err)
	}
	img, err = mutate.Config(img, v1.Config{User: "1000", Labels: map[string]string{"team": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(host+"/shop/api:1.0", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	digest, _ := img.Digest()

	creds, _ := json.Marshal(map[string]any{"allowInsecureRegistry": true})
	entry := func(reference, jmesPath string) kyvernov1.ContextEntry {
		return kyvernov1.ContextEntry{Name: "img", ImageRegistry: &kyvernov1.ImageRegistry{Reference: reference, JMESPath: jmesPath,
			ImageRegistryCredentials: &apiextv1.JSON{Raw: creds}}}
	}
	ctx := context.Background()
	vars := map[string]any{"request": map[string]any{"object": map[string]any{"image": host + "/shop/api:1.0"}}}

	off := New(nil, nil, Options{})
	if _, err := off.Load(ctx, "p", entry("{{ request.object.image }}", ""), vars); err == nil ||
		!strings.Contains(err.Error(), "image "+host+"/shop/api:1.0: registry access is off: turn it on with tally-scanner --registry-access") {
		t.Errorf("registry access off: %v", err)
	}

	l := New(nil, nil, Options{Images: RegistryOptions{Enabled: true}})
	for jp, want := range map[string]any{
		"configData.config.User":    "1000",
		"config.config.Labels.team": "a",
		"resolvedImage":             host + "/shop/api@" + digest.String(),
		"registry":                  host,
		"repository":                "shop/api",
		"identifier":                "1.0",
		"manifest.schemaVersion":    float64(2),
	} {
		got, err := l.Load(ctx, "p", entry("{{ request.object.image }}", jp), vars)
		if err != nil || got != want {
			t.Errorf("%s: got %v (%v), want %v", jp, got, err, want)
		}
	}
	if n := manifestReads.Load(); n > 1 {
		t.Errorf("the image was read %d times by digest, want once", n)
	}
	md, err := l.ImageMetadata(ctx, host+"/shop/api@"+digest.String(), nil, true)
	if err != nil || md["digest"] != digest.String() || md["tag"] != nil {
		t.Errorf("by digest: %v, %v", md["digest"], err)
	}
	if _, err := l.Load(ctx, "p", entry(host+"/shop/nothere:1", ""), vars); err == nil || !strings.Contains(err.Error(), "image "+host+"/shop/nothere:1") {
		t.Errorf("missing image: %v", err)
	}
}
