//go:build !unix

package cli

import (
	"fmt"
	"os"
	"runtime"
)

// runSupported says why `run` cannot work here: it needs Unix process
// groups and signals to keep every process of the command under the lease
// and to stop them when the lease is lost.
func runSupported() error {
	return fmt.Errorf("run is not supported on %s: it needs Unix process groups and signals", runtime.GOOS)
}

// runLocked is never reached (see runSupported).
func runLocked(argv []string, lease hold, opt runOptions, sigc <-chan os.Signal, env Env) (code int, lost bool) {
	release(lease, opt.margin, env)
	fmt.Fprintln(env.Stderr, "lockctl:", runSupported())
	return ExitError, false
}
