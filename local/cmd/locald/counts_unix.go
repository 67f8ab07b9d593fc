//go:build unix

package main

import (
	"os"
	"os/signal"
	"syscall"
)

// notifyDump relays SIGUSR1, the signal that asks for the counts, to c.
func notifyDump(c chan<- os.Signal) { signal.Notify(c, syscall.SIGUSR1) }
