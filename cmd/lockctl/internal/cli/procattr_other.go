//go:build !linux

package cli

import "syscall"

// procAttr puts the command in its own process group. Outside Linux there
// is no parent-death signal: a command whose lockctl was killed with
// SIGKILL runs on.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
