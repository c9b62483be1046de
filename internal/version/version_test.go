package version

import (
	"runtime/debug"
	"testing"
)

func TestResolve(t *testing.T) {
	vcs := func(rev, modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
	}
	tests := map[string]struct {
		stamped string
		info    *debug.BuildInfo
		want    string
	}{
		"a stamped version wins over everything": {
			stamped: "0.2.0", info: &debug.BuildInfo{Main: debug.Module{Version: "v0.1.0"}}, want: "0.2.0",
		},
		"go install gives the module version": {
			info: &debug.BuildInfo{Main: debug.Module{Version: "v0.1.0"}, Settings: vcs("0123456789abcdef", "false")}, want: "v0.1.0",
		},
		"a build in a clean checkout gives the revision": {
			info: &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs("0123456789abcdef", "false")}, want: "devel+0123456789ab",
		},
		"a build in a changed checkout says so": {
			info: &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs("0123456789abcdef", "true")}, want: "devel+0123456789ab-dirty",
		},
		"without VCS information: (devel)": {
			info: &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, want: "(devel)",
		},
		"without build information: (devel)": {want: "(devel)"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := resolve(tc.stamped, tc.info); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
