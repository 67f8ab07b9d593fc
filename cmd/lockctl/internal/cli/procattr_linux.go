package cli

import "syscall"

// procAttr puts the command in its own process group and has the kernel
// SIGKILL it when lockctl dies.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER of prctl(2).
const prSetChildSubreaper = 36

// becomeSubreaper makes lockctl the parent of the command's orphans (the
// processes its main process left running): when they exit, lockctl reaps
// them, so the process group empties observably even where PID 1 does not
// reap (a container whose init is the job itself). Without it (kernels
// before 3.4) orphans go to init as usual.
func becomeSubreaper() {
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
}

// reapOrphans reaps every child of lockctl that has exited. Call it only
// after the command's main process was waited for: all children left are
// orphans of the command.
func reapOrphans() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}
