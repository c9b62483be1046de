package cel

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

// jwt.Decode trusts a token only when the policy's key signed it: other
// spellings of a forged token (alg none, another algorithm family, a
// payload changed after signing, a truncated signature) are errors, never
// claims.
func TestJWTDecodeRefusesForgedTokens(t *testing.T) {
	const key = "s3cret"
	claims := jwt.MapClaims{"role": "admin", "exp": time.Now().Add(time.Hour).Unix()}
	signed, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(key))
	if err != nil {
		t.Fatal(err)
	}
	none, err := jwt.NewWithClaims(jwt.SigningMethodNone, claims).SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(signed, ".")
	tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(`{"role":"admin","exp":9999999999,"x":1}`)) + "." + parts[2]
	rs256Header := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"RS256","typ":"JWT"}`))
	prog, err := Compile(Spec{
		Mode:        ModeEnvoy,
		Variables:   []admissionregistrationv1.Variable{{Name: "token", Expression: `jwt.Decode(object.token, "` + key + `")`}},
		Validations: []admissionregistrationv1.Validation{{Expression: `variables.token.Valid && variables.token.Claims.role == "admin" ? envoy.Allowed().Response() : envoy.Denied(403).Response()`}},
	})
	if err != nil {
		t.Fatal(err)
	}
	authorize := func(token string) (AuthzDecision, error) {
		return prog.Authorize(context.Background(), &Input{Object: map[string]any{"token": token}})
	}
	if d, err := authorize(signed); err != nil || !d.Allowed {
		t.Fatalf("the key's own token: %+v, %v", d, err)
	}
	for name, token := range map[string]string{
		"alg none":           none,
		"payload changed":    tampered,
		"signature cut":      parts[0] + "." + parts[1] + "." + parts[2][:10],
		"RS256 header":       rs256Header + "." + parts[1] + "." + parts[2],
		"no signature":       parts[0] + "." + parts[1] + ".",
		"not a token at all": "admin",
	} {
		if d, err := authorize(token); err == nil || d.Allowed {
			t.Errorf("%s: %+v, %v: want an error", name, d, err)
		}
	}
}
