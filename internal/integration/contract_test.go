package integration_test

import (
	"net/http"
	"testing"

	"github.com/ft288/locks/internal/testenv"
	"github.com/ft288/locks/internal/verify/contract"
)

// TestEveryAnswerIsChecked: a test server holds every answer to
// api/openapi.yaml before the client has it — the service's and the
// runner's own for a request that matches no route. (internal/verify/contract's
// tests show that an undocumented answer is reported.) Not parallel, so no
// other test's answers are counted meanwhile.
func TestEveryAnswerIsChecked(t *testing.T) {
	srv := testenv.Start(t, testenv.Options{})
	r0 := res(t)
	before := contract.Checked()
	acquire(t, srv, r0, "w1", 30)
	wantProblem(t, call(t, srv, "GET", lockPath(r0+"-absent"), ""), 404, "not-found")
	if r := call(t, srv, "PUT", lockPath(r0), ""); r.status != 404 {
		t.Fatalf("PUT: got %d %s, want 404", r.status, r.raw)
	}
	resp, err := http.Head(srv.URL + lockPath(r0))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := contract.Checked() - before; got != 4 {
		t.Fatalf("got %d answers checked, want 4", got)
	}
}
