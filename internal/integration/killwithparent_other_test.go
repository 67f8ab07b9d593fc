//go:build !linux

package integration_test

import "os/exec"

// killWithParent does nothing here: only Linux kills a child with its
// parent (Pdeathsig).
func killWithParent(cmd *exec.Cmd) {}
