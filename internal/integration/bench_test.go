package integration_test

import (
	"strconv"
	"testing"

	"github.com/ft288/locks/internal/testenv"
)

// BenchmarkAcquireRelease measures one acquire + one release through the
// local runner, the real handlers and dynalite over loopback HTTP, and
// reports the DynamoDB requests sent per lock cycle. Run with
// go test -run '^$' -bench . ./local/
func BenchmarkAcquireRelease(b *testing.B) {
	srv := testenv.Start(b, testenv.Options{})
	srv.Ops.Take()
	b.ResetTimer()
	for i := range b.N {
		r0 := "bench-" + strconv.Itoa(i%64)
		acquire(b, srv, r0, "w1", 30)
		if r := call(b, srv, "DELETE", lockPath(r0), ownerBody("w1")); r.status != 204 {
			b.Fatalf("release: %d %s", r.status, r.raw)
		}
	}
	b.StopTimer()
	total := 0
	for _, n := range srv.Ops.Take() {
		total += n
	}
	b.ReportMetric(float64(total)/float64(b.N), "dynamodb-req/cycle")
}
