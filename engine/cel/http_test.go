package cel

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

// fakeHTTPData serves the http library from a map of "METHOD url" answers and
// records the headers and bodies it was given.
type fakeHTTPData struct {
	answers map[string]any
	seen    []string
}

func (f *fakeHTTPData) GetResource(context.Context, string, string, string, string) (map[string]any, error) {
	return nil, errors.New("none")
}
func (f *fakeHTTPData) ListResources(context.Context, string, string, string) (map[string]any, error) {
	return nil, errors.New("none")
}
func (f *fakeHTTPData) HTTPCall(_ context.Context, method, url string, body any, headers map[string]string, _ string) (any, error) {
	f.seen = append(f.seen, fmt.Sprintf("%s %s %v %v", method, url, body, headers))
	if v, ok := f.answers[method+" "+url]; ok {
		return v, nil
	}
	return nil, errors.New("calls to services are not allowed")
}

// http.Get and http.Post (both spellings, with and without headers) call
// the data source; its errors, and a missing one, are errors naming the
// call.
func TestHTTPLibrary(t *testing.T) {
	d := &fakeHTTPData{answers: map[string]any{
		"GET https://teams.svc/shop":  map[string]any{"owner": "a"},
		"POST https://check.svc/v1":   map[string]any{"allowed": true},
		"GET https://teams.svc/plain": "text",
	}}
	for _, tc := range []struct {
		expr    string
		data    ClusterData
		holds   bool
		errPart string
	}{
		{expr: "http.Get('https://teams.svc/shop').owner == 'a'", data: d, holds: true},
		{expr: "http.get('https://teams.svc/shop', {'Authorization': 'Bearer x'}).owner == 'a'", data: d, holds: true},
		{expr: "http.Post('https://check.svc/v1', {'image': object.image}).allowed == true", data: d, holds: true},
		{expr: "http.post('https://check.svc/v1', {'image': object.image}, {'X-A': 'b'}).allowed == true", data: d, holds: true},
		{expr: "http.Get('https://teams.svc/plain') == 'text'", data: d, holds: true},
		{expr: "http.Get('https://evil.example/x') == null", data: d, errPart: "http.Get(https://evil.example/x): calls to services are not allowed"},
		{expr: "http.Get('https://teams.svc/shop') == null", errPart: "http.Get(https://teams.svc/shop): no HTTP access"},
	} {
		p, err := Compile(Spec{Mode: ModeKyverno, Validations: []admissionregistrationv1.Validation{{Expression: tc.expr}}})
		if err != nil {
			t.Fatalf("%s: %v", tc.expr, err)
		}
		out := p.Evaluate(context.Background(), &Input{Object: map[string]any{"image": "nginx"}, Data: tc.data})
		if holds := out.Failed == -1; holds != tc.holds {
			t.Errorf("%s: holds %v, want %v (%v)", tc.expr, holds, tc.holds, out.Err)
		}
		if tc.errPart != "" && (out.Err == nil || !strings.Contains(out.Err.Error(), tc.errPart)) {
			t.Errorf("%s: error %v, want %q", tc.expr, out.Err, tc.errPart)
		}
	}
	want := []string{"map[Authorization:Bearer x]", "POST https://check.svc/v1 map[image:nginx] map[]", "map[image:nginx] map[X-A:b]"}
	all := strings.Join(d.seen, "\n")
	for _, w := range want {
		if !strings.Contains(all, w) {
			t.Errorf("calls lack %q:\n%s", w, all)
		}
	}
}
