package tester

import (
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Envoy and HTTP authorization requests are answered by the policies of
// their mode, as Kyverno's CLI reports them: the first validation that
// gives a response decides; a token signed with another key is an error;
// an expired one decodes but is not valid; a wrong expectation fails,
// naming what the policy answered.
func TestAuthorizationPayloads(t *testing.T) {
	sign := func(key string, claims jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(key))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	later := time.Now().Add(time.Hour).Unix()
	request := func(token string) string {
		return `{"attributes": {"request": {"http": {"method": "GET", "headers": {"authorization": "Bearer ` + token + `"}}}}}`
	}
	outcomes := runTestFiles(t, map[string]string{
		"policy.yaml": `apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: jwt-role}
spec:
  evaluation: {mode: Envoy}
  variables:
  - {name: parts, expression: 'object.attributes.request.http.headers[?"authorization"].orValue("").split(" ")'}
  - {name: token, expression: 'size(variables.parts) == 2 ? jwt.Decode(variables.parts[1], "s3cret") : null'}
  validations:
  - expression: 'variables.token == null || !variables.token.Valid ? envoy.Denied(401).WithBody("no token").Response() : null'
  - expression: 'variables.token.Claims.?role.orValue("") != "admin" ? envoy.Denied(403).Response() : null'
  - expression: 'envoy.Allowed().WithHeader("x-user", string(variables.token.Claims.sub)).Response()'
---
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: get-only}
spec:
  evaluation: {mode: HTTP}
  matchConditions: [{name: api, expression: 'object.attributes.path.startsWith("/api")'}]
  validations:
  - expression: 'object.attributes.method != "GET" ? http.Denied("only GET").Response() : null'
  - expression: 'object.attributes.Header("x-team").size() > 0 ? http.Allowed().Response() : null'
`,
		"admin.json":   request(sign("s3cret", jwt.MapClaims{"role": "admin", "sub": "alice", "exp": later})),
		"guest.json":   request(sign("s3cret", jwt.MapClaims{"role": "guest", "sub": "bob", "exp": later})),
		"expired.json": request(sign("s3cret", jwt.MapClaims{"role": "admin", "sub": "carol", "exp": time.Now().Add(-time.Hour).Unix()})),
		"forged.json":  request(sign("other", jwt.MapClaims{"role": "admin", "sub": "mallory", "exp": later})),
		"none.json":    `{"attributes": {"request": {"http": {"headers": {}}}}}`,
		"post.json":    `{"attributes": {"method": "POST", "path": "/api/x"}}`,
		"team.json":    `{"attributes": {"method": "GET", "path": "/api/x", "header": {"X-Team": ["a"]}}}`,
		"noteam.json":  `{"attributes": {"method": "GET", "path": "/api/x"}}`,
		"other.json":   `{"attributes": {"method": "POST", "path": "/web"}}`,
		TestFileName: `apiVersion: cli.kyverno.io/v1alpha1
kind: Test
metadata: {name: t}
policies: [policy.yaml]
envoyPayloads: [admin.json, guest.json, expired.json, forged.json, none.json]
httpPayloads: [post.json, team.json, noteam.json, other.json]
results:
- {policy: jwt-role, resources: [admin.json], kind: "", result: pass}
- {policy: jwt-role, resources: [guest.json, expired.json, none.json], kind: "", result: fail}
- {policy: jwt-role, resources: [forged.json], kind: "", result: error}
- {policy: jwt-role, resources: [guest.json], kind: "", result: pass}
- {policy: get-only, resources: [post.json], kind: "", result: fail}
- {policy: get-only, resources: [team.json], kind: "", result: pass}
- {policy: get-only, resources: [noteam.json, other.json], kind: "", result: skip}
- {policy: get-only, resources: [team.json], kind: "", result: fail}
`,
	})
	var got []string
	for _, o := range outcomes {
		got = append(got, o.Resource+"="+o.Status.String()+"/"+o.Got)
	}
	want := "admin.json=pass/pass guest.json=pass/fail expired.json=pass/fail none.json=pass/fail forged.json=pass/error guest.json=fail/fail " +
		"post.json=pass/fail team.json=pass/pass noteam.json=pass/skip other.json=pass/skip team.json=fail/pass"
	if strings.Join(got, " ") != want {
		t.Fatalf("got  %s\nwant %s\n(%+v)", strings.Join(got, " "), want, outcomes)
	}
	reasons := map[string]string{}
	for _, o := range outcomes {
		if o.Status == Failed {
			reasons[o.Resource] = o.Reason
		}
	}
	if reasons["guest.json"] != "request denied with status code 403" || reasons["team.json"] != "request allowed" {
		t.Fatalf("messages of the wrong expectations: %v", reasons)
	}
}
