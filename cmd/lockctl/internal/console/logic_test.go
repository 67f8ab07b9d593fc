package console

import (
	"os/exec"
	"testing"
)

// TestPageLogic runs the tests of the page's own logic (assets/logic.js)
// under Node, which the repository's tests need anyway (dynalite).
func TestPageLogic(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not found")
	}
	out, err := exec.Command(node, "--test", "testdata/logic_test.cjs").CombinedOutput()
	if err != nil {
		t.Fatalf("node --test: %v\n%s", err, out)
	}
}
