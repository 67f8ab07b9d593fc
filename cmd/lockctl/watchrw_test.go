//go:build unix

package main

import (
	"context"
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ft288/locks/client"
	"github.com/ft288/locks/internal/testenv"
)

// rwWatchLine is a line of `lockctl watch --rw`.
type rwWatchLine struct {
	Index        int64   `json:"index"`
	FencingToken int64   `json:"fencing_token"`
	Writer       *string `json:"writer"`
	Readers      []struct {
		Slot  int    `json:"slot"`
		Owner string `json:"owner"`
	} `json:"readers"`
}

// testWatchRW: `lockctl watch --rw` prints the read/write lock's state when
// it starts and each grant and end, read or write, as a JSON line with the
// service's index, and exits 0 on SIGTERM.
func testWatchRW(t *testing.T, bin string) {
	srv := testenv.Start(t, testenv.Options{Timeouts: shortWatch})
	res := uniqueName(t)
	c, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p := startLockctl(t, bin, srv.URL, nil, "watch", res, "--rw")
	line := func(n int) rwWatchLine {
		t.Helper()
		var l rwWatchLine
		if err := json.Unmarshal([]byte(p.waitLines(t, "", n)[n-1]), &l); err != nil {
			t.Fatalf("line %d: %v", n, err)
		}
		return l
	}
	if l := line(1); l.Index != 0 || l.FencingToken != 0 || l.Writer != nil || l.Readers == nil || len(l.Readers) != 0 {
		t.Fatalf("line 1: got %+v, want index 0, no writer, readers []", l)
	}
	r, err := c.TryAcquireRead(ctx, res, "r1", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	tok := r.FencingToken()
	if l := line(2); l.Index != 2*tok || l.FencingToken != tok || l.Writer != nil || len(l.Readers) != 1 ||
		l.Readers[0].Owner != "r1" || l.Readers[0].Slot != r.Slot() {
		t.Errorf("line 2: got %+v, want index %d (2 × %d + 1 − 1 lease), reader r1 in slot %d", l, 2*tok, tok, r.Slot())
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if l := line(3); l.Index != 2*tok+1 || len(l.Readers) != 0 || l.Writer != nil {
		t.Errorf("line 3: got %+v, want index %d, no leases", l, 2*tok+1)
	}
	w, err := c.TryAcquireWrite(ctx, res, "w1", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	wtok := w.FencingToken()
	if l := line(4); l.Index != 2*wtok || l.FencingToken != wtok || l.Writer == nil || *l.Writer != "w1" || len(l.Readers) != 0 {
		t.Errorf("line 4: got %+v, want index %d, writer w1", l, 2*wtok)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 10*time.Second); code != 0 || p.stderr.String() != "" {
		t.Errorf("after SIGTERM: exit %d, stderr %q; want 0 and nothing", code, p.stderr.String())
	}
	if n := strings.Count(p.stdout.String(), "\n"); n != 4 {
		t.Errorf("stdout: got %d lines, want 4: one per state", n)
	}
	_ = w.Release(ctx)
}
