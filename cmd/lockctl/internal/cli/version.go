package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// versionHelp is the help of `lockctl version`.
const versionHelp = `Prints the version of lockctl's module: a release tag, the pseudo-version
of the commit it was built from, or "(devel)" when the build recorded none.`

// Version returns lockctl's module version from the build information:
// a release tag, a pseudo-version of the commit it was built from, or
// "(devel)".
func Version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
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
