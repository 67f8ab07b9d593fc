package cli

import (
	"runtime/debug"
	"testing"
)

// TestVersion checks what `lockctl version` names for each kind of build:
// a build from a checkout names its commit, never a bare "(devel)".
func TestVersion(t *testing.T) {
	const rev = "4d8e32a35b3906e36af555627d2ad85864a9567a"
	vcs := func(modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
	}
	tests := []struct {
		name   string
		bi     *debug.BuildInfo
		linked string
		want   string
	}{
		{name: "ReleaseTag", bi: &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, want: "v1.2.3"},
		{name: "PseudoVersion", bi: &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261205185034-4d8e32a35b39+dirty"}, Settings: vcs("true")},
			want: "v0.0.0-20261205185034-4d8e32a35b39+dirty"},
		{name: "VCSStamped", bi: &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs("false")}, want: "commit 4d8e32a35b39"},
		{name: "VCSStampedModified", bi: &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs("true")}, want: "commit 4d8e32a35b39+dirty"},
		{name: "Linked", bi: &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, linked: rev, want: "commit 4d8e32a35b39"},
		{name: "LinkedDirty", bi: &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, linked: rev + "+dirty", want: "commit 4d8e32a35b39+dirty"},
		{name: "VCSOverLinked", bi: &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs("false")}, linked: "0123456789abcdef+dirty", want: "commit 4d8e32a35b39"},
		{name: "Nothing", bi: &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, want: "(devel)"},
		{name: "NoBuildInfo", want: "(devel)"},
		{name: "NoBuildInfoLinked", linked: rev, want: "commit 4d8e32a35b39"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := version(tt.bi, tt.linked); got != tt.want {
				t.Errorf("version: got %q, want %q", got, tt.want)
			}
		})
	}
}
