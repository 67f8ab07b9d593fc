package integration_test

import (
	"net/http"
	"net/url"
	"regexp"
	"testing"

	"github.com/ft288/locks/internal/testenv"
)

// exampleInDetail finds the JSON example a 400 invalid-json answer offers
// ("The request body must be a JSON object, e.g. {…}.").
var exampleInDetail = regexp.MustCompile(`e\.g\. (\{.*\})\.$`)

// TestWaitRouteBodyExample: a user who sends a waiting acquire with no
// body gets a 400 whose detail offers an example body. Pasted as offered,
// that example must be accepted by the route that offered it. On the
// waiting routes (issue 21) the example is the try route's, without the
// required wait_seconds, so the pasted example is refused 422.
func TestWaitRouteBodyExample(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	for _, tc := range []struct{ name, path string }{
		{"LockWait", waitPath(res(t) + "-lock")},
		{"SemaphoreWait", "/semaphores/" + url.PathEscape(res(t)+"-sem") + "/wait"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := call(t, srv, http.MethodPost, tc.path, "")
			wantProblem(t, r, 400, "invalid-json")
			detail, _ := r.json["detail"].(string)
			m := exampleInDetail.FindStringSubmatch(detail)
			if m == nil {
				t.Fatalf("got detail %q, want one offering an example body", detail)
			}
			pasted := call(t, srv, http.MethodPost, tc.path, m[1])
			if pasted.status != 200 {
				t.Errorf("POST %s with the example its own 400 offered, %s: got %d %s, want 200",
					tc.path, m[1], pasted.status, pasted.raw)
			}
		})
	}
}
