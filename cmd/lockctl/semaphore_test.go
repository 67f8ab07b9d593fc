//go:build unix

package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/ft288/locks/internal/testenv"
)

// testSemaphoreAtMostN starts five `lockctl run -n 2` at once, each running
// a command that logs its start and end with its slot and fencing token:
// at no moment do more than two commands run, two that overlap have
// different slots, every command gets its own token, and two do run at
// once (the semaphore is not a mutex). That two run at once is an event,
// not a race against the clock: a command waits (up to 10 s) until two
// have started, then runs 0.4 s, the window in which a third would show;
// with a fixed 0.4 s, commands started 0.4 s or more apart (a loaded
// machine) never overlapped.
func testSemaphoreAtMostN(t *testing.T, bin string) {
	srv := testenv.Start(t, testenv.Options{})
	log, name := filepath.Join(t.TempDir(), "log"), uniqueName(t)
	const script = `echo "start $LOCK_SLOT $LOCK_FENCING_TOKEN $(date +%s%N)" >> "$LOG"; ` +
		`i=0; while [ "$(grep -c '^start' "$LOG")" -lt 2 ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done; ` +
		`sleep 0.4; echo "end $LOCK_SLOT $LOCK_FENCING_TOKEN $(date +%s%N)" >> "$LOG"`
	const n, permits = 5, 2
	procs := make([]*proc, n)
	for i := range procs {
		procs[i] = startLockctl(t, bin, srv.URL, []string{"LOG=" + log},
			"run", name, "-n", fmt.Sprint(permits), "--ttl", "5", "--wait", "18", "--", "sh", "-c", script)
	}
	for i, p := range procs {
		if code := p.wait(t, 20*time.Second); code != 0 {
			t.Fatalf("lockctl %d: exit %d, want 0; stderr: %s", i, code, p.stderr.String())
		}
	}
	type event struct {
		at    int64
		start bool
		slot  int
		token int64
	}
	f, err := os.Open(log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var events []event
	tokens := map[int64]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var kind string
		var e event
		if _, err := fmt.Sscanf(sc.Text(), "%s %d %d %d", &kind, &e.slot, &e.token, &e.at); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		e.start = kind == "start"
		if e.start {
			tokens[e.token]++
		}
		events = append(events, e)
	}
	if len(tokens) != n || len(events) != 2*n {
		t.Fatalf("got %d distinct tokens in %d events, want %d commands with a token each: %v", len(tokens), len(events), n, events)
	}
	sort.SliceStable(events, func(i, j int) bool {
		if events[i].at != events[j].at {
			return events[i].at < events[j].at
		}
		return !events[i].start // an end at the same instant comes first
	})
	running, most := map[int64]int{}, 0 // token → slot
	for _, e := range events {
		if !e.start {
			delete(running, e.token)
			continue
		}
		for tok, slot := range running {
			if slot == e.slot {
				t.Errorf("token %d started in slot %d while token %d still ran there", e.token, e.slot, tok)
			}
		}
		if e.slot < 0 || e.slot >= permits {
			t.Errorf("token %d: slot %d, want 0 to %d", e.token, e.slot, permits-1)
		}
		running[e.token] = e.slot
		if most = max(most, len(running)); len(running) > permits {
			t.Errorf("token %d started while %d commands ran: more than %d at once", e.token, len(running)-1, permits)
		}
	}
	if most != permits {
		t.Errorf("at most %d commands ran at once, want %d", most, permits)
	}
}
