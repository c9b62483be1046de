package sigverify

import (
	"context"
	"fmt"

	"github.com/sigstore/cosign/v2/pkg/cosign"
	rekorclient "github.com/sigstore/rekor/pkg/client"
	"github.com/sigstore/sigstore/pkg/tuf"

	"github.com/tally-dev/tally/engine/imageverify"
)

// defaultRekor is the public Rekor instance, Kyverno's default.
const defaultRekor = "https://rekor.sigstore.dev"

// rekorFor sets the transparency log cosign checks: the attestor's Rekor
// (or the public one) and its public key (or the public one's, from
// sigstore's TUF root). Both need the network; an attestor that sets
// rekor.ignoreTlog needs neither.
func rekorFor(ctx context.Context, co *cosign.CheckOpts, r *imageverify.Rekor) error {
	url := defaultRekor
	if r != nil && r.URL != "" {
		url = r.URL
	}
	client, err := rekorclient.GetRekorClient(url)
	if err != nil {
		return infra(fmt.Errorf("failed to create the Rekor client for %s: %w", url, err))
	}
	co.RekorClient = client
	if r != nil && r.PubKey != "" {
		pubs := cosign.NewTrustedTransparencyLogPubKeys()
		if err := pubs.AddTransparencyLogPubKey([]byte(r.PubKey), tuf.Active); err != nil {
			return fmt.Errorf("failed to load the Rekor public key: %w", err)
		}
		co.RekorPubKeys = &pubs
		return nil
	}
	pubs, err := cosign.GetRekorPubs(ctx)
	if err != nil {
		return infra(fmt.Errorf("failed to load the Rekor public keys: %w", err))
	}
	co.RekorPubKeys = pubs
	return nil
}

// infraError is a failure of the verification's infrastructure (sigstore's
// TUF root, Rekor, the CT log), not of the image: an error result.
type infraError struct{ err error }

func (e *infraError) Error() string { return e.err.Error() }
func (e *infraError) Unwrap() error { return e.err }

func infra(err error) error { return &infraError{err: err} }
