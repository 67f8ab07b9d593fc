package cli

import "syscall"

// procAttr puts the command in its own process group and has the kernel
// SIGKILL it when lockctl dies.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
