package integration_test

import (
	"os/exec"
	"syscall"
)

// killWithParent has the kernel kill cmd's process when this one dies, so
// that a process the test paused (SIGSTOP) is not left behind by a test
// binary that timed out or crashed.
func killWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
