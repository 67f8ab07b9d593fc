package integration_test

import (
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/ft288/locks/internal/testenv"
)

// TestAcquireRefusalAnswerEveryKind: the try's refusal of each kind, now
// written by one acquireAnswer (issue 23), keeps its own wire shape: the
// name field (a lock's resource, the others' name), the time the holder
// frees under the kind's field (a lock's expires_at, the others' free_at)
// equal to the holder's expiry, a Retry-After of the whole seconds until
// it on the service's clock (rounded up, at least 1), and no queue_ticket
// on a try. A lock's try knows the holder's expiry only when the store's
// refusal carries the old item (the path AWS takes): on dynalite's path
// its refusal has neither expires_at nor Retry-After, before issue 23 as
// after.
func TestAcquireRefusalAnswerEveryKind(t *testing.T) {
	t.Parallel()
	for _, store := range []testenv.StoreMode{testenv.StoreDynalite, testenv.StoreOldItem} {
		t.Run(map[testenv.StoreMode]string{testenv.StoreDynalite: "dynalite", testenv.StoreOldItem: "old-item"}[store], func(t *testing.T) {
			t.Parallel()
			refusalAnswers(t, store)
		})
	}
}

func refusalAnswers(t *testing.T, store testenv.StoreMode) {
	clock := testenv.NewClock()
	srv := testenv.Start(t, testenv.Options{Now: clock.Now, Store: store})
	name := res(t)
	for _, k := range []struct {
		kind, path, body, lease, nameField, freeField string
	}{
		{"lock", "/locks/" + url.PathEscape(name), `{"owner":"%s","ttl_seconds":30}`, "lock", "resource", "expires_at"},
		{"rwlock", rwPath(name, "/write"), `{"owner":"%s","ttl_seconds":30}`, "lease", "name", "free_at"},
		{"semaphore", semPath(name), `{"owner":"%s","ttl_seconds":30,"permits":1}`, "permit", "name", "free_at"},
	} {
		t.Run(k.kind, func(t *testing.T) {
			body := func(owner string) string { return fmtBody(k.body, owner) }
			r := call(t, srv, "POST", k.path, body("a"))
			if r.status != 200 || r.json["acquired"] != true {
				t.Fatalf("take: %d %s", r.status, r.raw)
			}
			held := r.json[k.lease].(map[string]any)
			known := k.kind != "lock" || store == testenv.StoreOldItem
			for _, step := range []struct {
				advance time.Duration
				retry   string
			}{{0, "30"}, {10*time.Second + 500*time.Millisecond, "20"}, {19*time.Second + 400*time.Millisecond, "1"}} {
				clock.Advance(step.advance)
				if !known {
					step.retry, held["expires_at"] = "", nil
				}
				r = call(t, srv, "POST", k.path, body("b"))
				if r.status != 200 || r.json["acquired"] != false || r.json[k.nameField] != name ||
					r.json[k.freeField] != held["expires_at"] || r.json["queue_ticket"] != nil || r.json[k.lease] != nil {
					t.Errorf("refusal: got %d %s, want acquired false, %s %q, %s %v, no queue_ticket", r.status, r.raw,
						k.nameField, name, k.freeField, held["expires_at"])
				}
				if got := r.header.Get("Retry-After"); got != step.retry {
					t.Errorf("Retry-After %q, want %q", got, step.retry)
				}
			}
		})
	}
}

func fmtBody(format, owner string) string { return fmt.Sprintf(format, owner) }
