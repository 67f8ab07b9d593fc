package api

import (
	"strings"
	"testing"

	"github.com/ft288/locks/locklogic"
)

// TestProblemSpeaksOfTheKind: a read/write lock's problems speak of its
// leases, a semaphore's of its permits, a lock's of the lock; every row
// with words of its own for a semaphore has them for a read/write lock
// too, and the routes pick their kind by path.
func TestProblemSpeaksOfTheKind(t *testing.T) {
	for _, row := range errorTable {
		if row.sem != "" && row.rw == "" {
			t.Errorf("%v: a semaphore's detail but none for a read/write lock (it would speak of a lock)", row.err)
		}
		if row.rw != "" && (strings.Contains(row.rw, "semaphore") || strings.Contains(row.rw, "permit")) {
			t.Errorf("%v: read/write lock detail %q speaks of a semaphore", row.err, row.rw)
		}
	}
	for _, tc := range []struct {
		kind noun
		want string
	}{
		{nounLock, `There is no live lock on "x"`},
		{nounSemaphore, `There is no live permit of the semaphore "x"`},
		{nounRWLock, `There is no live lease of the read/write lock "x" in that mode and slot`},
	} {
		if p := problemOf(locklogic.ErrNotFound, "x", tc.kind); p.Status != 404 || !strings.HasPrefix(p.Detail, tc.want) {
			t.Errorf("kind %d: got %d %q, want 404 %q…", tc.kind, p.Status, p.Detail, tc.want)
		}
	}
	for i := range rows {
		r := &rows[i]
		want := nounLock
		switch {
		case strings.Contains(r.Path, "/rwlocks"):
			want = nounRWLock
		case strings.Contains(r.Path, "/semaphores"):
			want = nounSemaphore
		}
		if got := r.noun(); got != want {
			t.Errorf("%s: noun %d, want %d", r.key, got, want)
		}
	}
}
