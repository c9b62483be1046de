package conformance

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"regexp"

	"github.com/tally-dev/tally/engine/imageverify/sigverify/sigtest"
)

// CanImageRegistry: the provider serves a registry the implementation can
// reach, holding the suite's image fixtures (PushImageFixtures); cases
// name it ${REGISTRY}.
const CanImageRegistry = "image-registry"

// ImageRegistryHost is a provider with a registry of the suite's images.
type ImageRegistryHost interface {
	// ImageRegistry is the registry's host[:port], as the implementation
	// under test reaches it.
	ImageRegistry() string
}

// The suite's signing key: its public half is in the cases' policies.
var (
	//go:embed testdata/cosign.key
	fixtureKey []byte
	//go:embed testdata/cosign.pub
	FixturePublicKey string
	// The suite's notary key and its certificate (a Notary attestor's).
	//go:embed testdata/notary.key
	fixtureNotaryKey []byte
	//go:embed testdata/notary.crt
	FixtureNotaryCert string
)

// Image fixtures, under ${REGISTRY}/conformance/ (R41, R43):
//
//	signed:1.0      signed with the suite's key
//	unsigned:1.0    no signature
//	other-key:1.0   signed with another key
//	attested:1.0    signed, and attested (predicate type ReviewPredicate:
//	                {"reviewed": true, "reviewer": "platform"})
//	shared:1.0      signed (R43: many Pods run it)
//	notary:1.0      a notary signature (JWS, an OCI referrer) of the suite's
//	                notary key, no cosign signature
//
// Each is the same image on every push (sigtest.FixtureImage): cases name
// its digest ${DIGEST:<name>} (R42).
const ReviewPredicate = "https://tally.dev/attestations/review/v1"

// PushImageFixtures writes the suite's images to the registry at host
// (reachable from this process over plain HTTP).
func PushImageFixtures(r *sigtest.Registry) error {
	key, err := sigtest.LoadKey(fixtureKey)
	if err != nil {
		return fmt.Errorf("the suite's key: %w", err)
	}
	other, err := sigtest.NewKey()
	if err != nil {
		return err
	}
	notary, err := sigtest.LoadNotaryKey(fixtureNotaryKey, []byte(FixtureNotaryCert))
	if err != nil {
		return fmt.Errorf("the suite's notary key: %w", err)
	}
	push := func(name string, sign ...*sigtest.Key) error {
		img, err := sigtest.FixtureImage("conformance/" + name)
		if err != nil {
			return err
		}
		d, err := r.PushImage("conformance/"+name, "1.0", img)
		if err != nil {
			return err
		}
		for _, k := range sign {
			if err := k.Sign(d, nil); err != nil {
				return fmt.Errorf("sign %s: %w", name, err)
			}
		}
		switch name {
		case "attested":
			return key.Attest(d, ReviewPredicate, map[string]any{"reviewed": true, "reviewer": "platform"})
		case "notary":
			return notary.Sign(d)
		}
		return nil
	}
	for _, f := range []struct {
		name string
		keys []*sigtest.Key
	}{{"signed", []*sigtest.Key{key}}, {"unsigned", nil}, {"other-key", []*sigtest.Key{other}}, {"attested", []*sigtest.Key{key}}, {"shared", []*sigtest.Key{key}}, {"notary", nil}} {
		if err := push(f.name, f.keys...); err != nil {
			return fmt.Errorf("image fixture %s: %w", f.name, err)
		}
	}
	return nil
}

// fixtureDigest is the digest of the image fixture named (the images are
// the same on every push: sigtest.FixtureImage).
func fixtureDigest(fixture string) (string, error) {
	img, err := sigtest.FixtureImage("conformance/" + fixture)
	if err != nil {
		return "", err
	}
	d, err := img.Digest()
	if err != nil {
		return "", err
	}
	return d.String(), nil
}

// digestPlaceholder is ${DIGEST:<fixture>} in a case: that fixture's digest.
var digestPlaceholder = regexp.MustCompile(`\$\{DIGEST:([a-z0-9-]+)\}`)

// withRegistry is the case with ${REGISTRY} replaced by the provider's
// registry host, ${COSIGN_PUBLIC_KEY} by the suite's public key,
// ${NOTARY_CERT} by its notary certificate and ${DIGEST:<fixture>} by the
// fixture's digest.
func withRegistry(c *Case, host string) (*Case, error) {
	data, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	pub, _ := json.Marshal(FixturePublicKey)
	cert, _ := json.Marshal(FixtureNotaryCert)
	data = bytes.ReplaceAll(data, []byte("${REGISTRY}"), []byte(host))
	data = bytes.ReplaceAll(data, []byte(`"${COSIGN_PUBLIC_KEY}"`), pub)
	data = bytes.ReplaceAll(data, []byte(`"${NOTARY_CERT}"`), cert)
	var digestErr error
	data = digestPlaceholder.ReplaceAllFunc(data, func(m []byte) []byte {
		d, err := fixtureDigest(string(digestPlaceholder.FindSubmatch(m)[1]))
		if err != nil {
			digestErr = err
		}
		return []byte(d)
	})
	if digestErr != nil {
		return nil, digestErr
	}
	var out Case
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, err
	}
	out.Name = c.Name
	return &out, nil
}
