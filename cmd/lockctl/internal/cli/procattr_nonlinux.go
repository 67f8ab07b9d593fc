//go:build unix && !linux

package cli

import "syscall"

// procAttr puts the command in its own process group. Outside Linux there
// is no parent-death signal: a command whose lockctl was killed with
// SIGKILL runs on.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// becomeSubreaper does nothing outside Linux: the command's orphans go to
// init, which reaps them, so its process group still empties.
func becomeSubreaper() {}

// reapOrphans does nothing outside Linux (see becomeSubreaper).
func reapOrphans(int) {}
