package match

import "testing"

func TestParseKind(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    KindSelector
		wantErr bool
	}{
		"a kind":                             {in: "Pod", want: KindSelector{"*", "*", "Pod", ""}},
		"the wildcard kind":                  {in: "*", want: KindSelector{"*", "*", "*", ""}},
		"a version and kind":                 {in: "v1/Pod", want: KindSelector{"*", "v1", "Pod", ""}},
		"any version of a kind":              {in: "*/Pod", want: KindSelector{"*", "*", "Pod", ""}},
		"a group, version and kind":          {in: "networking.k8s.io/v1/NetworkPolicy", want: KindSelector{"networking.k8s.io", "v1", "NetworkPolicy", ""}},
		"a group with any version":           {in: "apps/*/Deployment", want: KindSelector{"apps", "*", "Deployment", ""}},
		"every kind of a group":              {in: "apps/*/*", want: KindSelector{"apps", "*", "*", ""}},
		"the core group spelt out":           {in: "/v1/Pod", want: KindSelector{"", "v1", "Pod", ""}},
		"a kind and subresource":             {in: "Pod/status", want: KindSelector{"*", "*", "Pod", "status"}},
		"a kind dot subresource":             {in: "Pod.status", want: KindSelector{"*", "*", "Pod", "status"}},
		"a version, kind dot subresource":    {in: "v1/Pod.eviction", want: KindSelector{"*", "v1", "Pod", "eviction"}},
		"a version, kind and subresource":    {in: "v1/Pod/status", want: KindSelector{"*", "v1", "Pod", "status"}},
		"any version, kind and subresource":  {in: "*/Node/status", want: KindSelector{"*", "*", "Node", "status"}},
		"a group, version, kind dot sub":     {in: "apps/v1/Deployment.scale", want: KindSelector{"apps", "v1", "Deployment", "scale"}},
		"all four parts":                     {in: "apps/v1/Deployment/scale", want: KindSelector{"apps", "v1", "Deployment", "scale"}},
		"everything and every subresource":   {in: "*/*", want: KindSelector{"*", "*", "*", "*"}},
		"an empty kind is invalid":           {in: "", wantErr: true},
		"five parts are invalid":             {in: "a/b/C/d/e", wantErr: true},
		"an empty part is invalid":           {in: "v1/", wantErr: true},
		"an empty version is invalid":        {in: "apps//Deployment", wantErr: true},
		"an empty kind after a group is bad": {in: "apps/v1/", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseKind(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseKind(%q) error = %v, want error %v", tc.in, err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("ParseKind(%q) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}
