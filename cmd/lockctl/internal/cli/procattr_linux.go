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

// reapOrphans reaps the exited children of lockctl in process group pgid:
// the command's orphans. Call it only after the command's main process was
// waited for. It never touches another child (wait4 on -pgid, not -1), so
// it cannot steal the exit status of a process someone else waits for.
func reapOrphans(pgid int) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-pgid, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}
