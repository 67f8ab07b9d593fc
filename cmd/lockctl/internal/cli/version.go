package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// versionHelp is the help of `lockctl version`.
const versionHelp = `Prints the version of lockctl's module: a release tag or the pseudo-version
of the commit it was built from (+dirty: with changes not committed), else
"commit REVISION" when only the commit is known (make lockctl and make
install record it), or "(devel)" when the build recorded none.`

// revision is the commit lockctl was built from, with "+dirty" when the
// work tree had changes. `make lockctl` and `make install` set it
// (-ldflags -X) for the builds Go does not stamp: GOFLAGS=-buildvcs=false,
// or a checkout that is a git worktree.
var revision string

// Version returns lockctl's version: the module's release tag or
// pseudo-version from the build information, else "commit REVISION[+dirty]"
// from the build's VCS settings or the linker, else "(devel)".
func Version() string {
	bi, _ := debug.ReadBuildInfo()
	return version(bi, revision)
}

// version is Version over the build information bi (nil when absent) and
// the revision the linker set (empty when none).
func version(bi *debug.BuildInfo, linked string) string {
	if bi != nil && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	rev := linked
	if bi != nil {
		var vcsRev, modified string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				vcsRev = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
		if vcsRev != "" {
			rev = vcsRev
			if modified == "true" {
				rev += "+dirty"
			}
		}
	}
	if rev == "" {
		return "(devel)"
	}
	// Twelve hex digits, as in a pseudo-version.
	hash, dirty, _ := strings.Cut(rev, "+")
	if len(hash) > 12 {
		hash = hash[:12]
	}
	if dirty != "" {
		hash += "+" + dirty
	}
	return "commit " + hash
}

// versionCmd is `lockctl version`.
func versionCmd(args []string, env Env) int {
	fs := newFlagSet(lookup("version"), env)
	if err := fs.Parse(args); err != nil {
		return parseFailed(fs, env, err)
	}
	if fs.NArg() > 0 {
		return parseFailed(fs, env, &usageError{fmt.Sprintf("unexpected arguments: %q", fs.Args())})
	}
	fmt.Fprintf(env.Stdout, "lockctl %s (%s %s/%s)\n", Version(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return ExitOK
}
