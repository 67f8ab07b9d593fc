package integration_test

import (
	"testing"

	"github.com/ft288/locks/internal/testenv"
)

// TestStoreModes: the harness's two store modes answer a refused write as
// their stores do. On dynalite's path the service reads the item to explain
// a release refused to another owner (one GetItem), and a refused acquire
// knows no holder expiry; on the path AWS takes (testenv.StoreOldItem) the
// refusal carries the old item, so the release needs no read and the
// acquire answers the holder's expires_at and a Retry-After.
func TestStoreModes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode       testenv.StoreMode
		gets       int
		holderTime bool
	}{
		{testenv.StoreDynalite, 1, false},
		{testenv.StoreOldItem, 0, true},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			t.Parallel()
			srv := testenv.Start(t, testenv.Options{Store: tc.mode})
			if srv.Store != tc.mode {
				t.Fatalf("got a server in mode %v, want %v", srv.Store, tc.mode)
			}
			name := res(t)
			acquire(t, srv, name, "a", 30)
			r := call(t, srv, "POST", lockPath(name), acquireBody("b", 30))
			if r.status != 200 || r.json["acquired"] != false {
				t.Fatalf("acquire by b: got %d %s, want 200 acquired false", r.status, r.raw)
			}
			if _, ok := r.json["expires_at"]; ok != tc.holderTime || (r.header.Get("Retry-After") != "") != tc.holderTime {
				t.Errorf("acquire by b: got %s (Retry-After %q), want the holder's expiry %v", r.raw, r.header.Get("Retry-After"), tc.holderTime)
			}
			srv.Ops.Take()
			wantProblem(t, call(t, srv, "DELETE", lockPath(name), ownerBody("b")), 403, "forbidden")
			if ops := srv.Ops.Take(); ops["UpdateItem"] != 1 || ops["GetItem"] != tc.gets {
				t.Errorf("release by b: got %v, want 1 UpdateItem and %d GetItem", ops, tc.gets)
			}
		})
	}
}
