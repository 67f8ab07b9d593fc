package goclient_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestClientExamples runs the Go client's own examples (client/
// example_test.go, the ones godoc shows) against the local runner over the
// real handlers and dynalite instead of the client's in-memory fake: the
// client module's tests, in their own module, with LOCKS_TEST_ENDPOINT
// set. Each example's Output comment must hold against the real service.
func TestClientExamples(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("go", "test", "-count=1", "-v", "-run", "^Example", ".")
	cmd.Dir = "../../../client"
	cmd.Env = append(os.Environ(), "LOCKS_TEST_ENDPOINT="+endpoint(), "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the client's examples against the local runner: %v\n%s", err, out)
	}
	if n := strings.Count(string(out), "--- PASS: Example"); n < 5 {
		t.Fatalf("ran %d examples, want the client's 5:\n%s", n, out)
	}
}
