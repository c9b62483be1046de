package cel

import (
	"context"
	"errors"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

// fakeVerification verifies the images it is told are signed, by the
// attestors it is told sign them.
type fakeVerification struct {
	signed   map[string][]string // image -> attestors that signed it
	payloads map[string]any      // attestation -> payload
	down     bool
	calls    []string
}

func (f *fakeVerification) VerifySignatures(_ context.Context, image string, attestors []string) (int, error) {
	f.calls = append(f.calls, "sig "+image+" "+strings.Join(attestors, ","))
	if f.down {
		return 0, errors.New("registry down")
	}
	n := 0
	for _, a := range attestors {
		for _, s := range f.signed[image] {
			if a == s {
				n++
			}
		}
	}
	return n, nil
}

func (f *fakeVerification) VerifyAttestations(_ context.Context, image, att string, attestors []string) (int, error) {
	f.calls = append(f.calls, "att "+image+" "+att+" "+strings.Join(attestors, ","))
	if _, ok := f.payloads[att]; !ok {
		return 0, nil
	}
	return len(attestors), nil
}

func (f *fakeVerification) Payload(_ context.Context, image, att string) (any, error) {
	p, ok := f.payloads[att]
	if !ok {
		return nil, errors.New("attestation " + att + " not verified")
	}
	return p, nil
}

func (f *fakeVerification) ImageData(_ context.Context, image string) (map[string]any, error) {
	return map[string]any{"image": image, "digest": "sha256:abc"}, nil
}

func TestImageVerificationFunctions(t *testing.T) {
	p, err := Compile(Spec{Mode: ModeImage, Validations: []admissionregistrationv1.Validation{
		{Expression: "images.containers.map(i, verifyImageSignatures(i, [attestors.key])).all(n, n > 0)", Message: "unsigned"},
		{Expression: "images.containers.all(i, verifyAttestationSignatures(i, attestations.sbom, [attestors.key]) > 0)", Message: "no sbom"},
		{Expression: "images.containers.all(i, extractPayload(i, attestations.sbom).bomFormat == 'CycloneDX')", Message: "not cyclonedx"},
		{Expression: "getImageData(images.containers[0]).digest == 'sha256:abc'", Message: "image data"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	in := func(f *fakeVerification) *Input {
		return &Input{
			Images:       map[string][]string{"containers": {"reg/a:1", "reg/b:1"}},
			Attestors:    map[string]any{"key": map[string]any{"name": "key"}, "other": map[string]any{"name": "other"}},
			Attestations: map[string]string{"sbom": "sbom"},
			Verify:       f,
		}
	}
	all := &fakeVerification{signed: map[string][]string{"reg/a:1": {"key"}, "reg/b:1": {"key"}}, payloads: map[string]any{"sbom": map[string]any{"bomFormat": "CycloneDX"}}}
	if o := p.Evaluate(context.Background(), in(all)); o.Failed != -1 || o.Err != nil {
		t.Fatalf("all signed: %+v", o)
	}
	if len(all.calls) != 4 || all.calls[0] != "sig reg/a:1 key" || all.calls[2] != "att reg/a:1 sbom key" {
		t.Errorf("calls: %q", all.calls)
	}
	one := &fakeVerification{signed: map[string][]string{"reg/a:1": {"key"}}, payloads: map[string]any{"sbom": map[string]any{"bomFormat": "CycloneDX"}}}
	if o := p.Evaluate(context.Background(), in(one)); o.Failed != 0 || o.Err != nil {
		t.Errorf("one unsigned: %+v", o)
	}
	if o := p.Evaluate(context.Background(), in(&fakeVerification{down: true})); o.Failed != 0 || o.Err == nil || !strings.Contains(o.Err.Error(), "registry down") {
		t.Errorf("registry down: %+v", o)
	}
	off := in(nil)
	off.Verify = nil
	if o := p.Evaluate(context.Background(), off); o.Err == nil || !strings.Contains(o.Err.Error(), "without registry access") {
		t.Errorf("no verifier: %+v", o)
	}
}
