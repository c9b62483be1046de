package podsecurity

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestImagesNamed(t *testing.T) {
	spec := &corev1.PodSpec{
		Containers:     []corev1.Container{{Name: "app", Image: "nginx"}, {Name: "side", Image: "ghcr.io/x/side:1.2"}},
		InitContainers: []corev1.Container{{Name: "init", Image: "localhost:5000/init@sha256:abc"}},
	}
	tests := map[string]struct {
		detail string
		want   []string
	}{
		"one container":                       {`container "app" must not set securityContext.privileged=true`, []string{"docker.io/nginx:latest"}},
		"several containers, init ones too":   {`containers "side", "init" must set securityContext.allowPrivilegeEscalation=false`, []string{"ghcr.io/x/side:1.2", "localhost:5000/init@sha256:abc"}},
		"pod or containers":                   {`pod or containers "app" must set securityContext.runAsNonRoot=true`, []string{"docker.io/nginx:latest"}},
		"only the first sentence counts":      {`container "app" must set a; container "side" must set b`, []string{"docker.io/nginx:latest"}},
		"an unknown container is named":       {`container "gone" must set x`, []string{"gone"}},
		"a pod-level detail names no image":   {`hostNetwork=true`, nil},
		"a detail without must names nothing": {`container "app" uses hostPort 80`, nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := imagesNamed(tc.detail, spec); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
