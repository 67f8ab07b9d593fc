package testenv

import (
	"syscall"
)

// sysPidfdOpen is pidfd_open(2)'s number, the same on every Linux
// architecture (the syscall package predates it).
const sysPidfdOpen = 434

// Exited returns a channel that is closed once the process pid has ended
// (exited or been killed; it may still await its reaping). The process
// need not be the caller's child: it waits on a pidfd, not by polling.
// Without pidfd_open (Linux before 5.3) it polls instead.
func Exited(pid int) <-chan struct{} {
	done := make(chan struct{})
	fd, _, errno := syscall.Syscall(sysPidfdOpen, uintptr(pid), 0, 0)
	if errno == syscall.ESRCH {
		close(done) // gone already
		return done
	}
	if errno != 0 {
		go pollExit(pid, done)
		return done
	}
	go func() {
		defer close(done)
		defer syscall.Close(int(fd))
		// A pidfd becomes readable when its process ends.
		ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
		if err != nil {
			pollExit(pid, nil)
			return
		}
		defer syscall.Close(ep)
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(fd)}
		if err := syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, int(fd), &ev); err != nil {
			pollExit(pid, nil)
			return
		}
		events := make([]syscall.EpollEvent, 1)
		for {
			n, err := syscall.EpollWait(ep, events, -1)
			if n > 0 || (err != nil && err != syscall.EINTR) {
				return
			}
		}
	}()
	return done
}
