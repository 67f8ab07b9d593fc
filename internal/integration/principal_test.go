package integration_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ft288/locks/internal/testenv"
)

// TestPrincipalBinding: with IAM auth, a lease answers only to the principal
// that took it, even when another principal sends the same owner string. An
// assumed role counts as one principal across its sessions.
func TestPrincipalBinding(t *testing.T) {
	t.Parallel()
	// The test names the caller in a header; API Gateway would take it from
	// the SigV4 signature. Without the header the request has no identity.
	srv := testenv.Start(t, testenv.Options{Identity: func(r *http.Request) *events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription {
		arn := r.Header.Get("X-Test-Caller")
		if arn == "" {
			return nil
		}
		return &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{AccountID: "123456789012", UserARN: arn}
	}})
	as := func(arn, method, path, body string) reply {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if arn != "" {
			req.Header.Set("X-Test-Caller", arn)
		}
		return do(t, req)
	}
	const (
		workerA1 = "arn:aws:sts::123456789012:assumed-role/worker-a/session1"
		workerA2 = "arn:aws:sts::123456789012:assumed-role/worker-a/session2"
		bob      = "arn:aws:iam::123456789012:user/bob"
	)
	r0 := res(t)
	if r := as(workerA1, "POST", lockPath(r0), acquireBody("w1", 30)); r.json["acquired"] != true {
		t.Fatalf("worker-a acquire: got %d %s", r.status, r.raw)
	}
	if r := as(bob, "POST", lockPath(r0), acquireBody("w1", 30)); r.status != 200 || r.json["acquired"] != false {
		t.Errorf("bob re-acquire with the same owner string: got %d %s, want acquired:false", r.status, r.raw)
	}
	if r := as("", "POST", lockPath(r0), acquireBody("w1", 30)); r.json["acquired"] != false {
		t.Errorf("anonymous re-acquire with the same owner string: got %s, want acquired:false", r.raw)
	}
	wantProblem(t, as(bob, "POST", lockPath(r0)+"/renew", renewBody("w1", 30)), 403, "forbidden")
	wantProblem(t, as(bob, "DELETE", lockPath(r0), ownerBody("w1")), 403, "forbidden")
	wantProblem(t, as("", "DELETE", lockPath(r0), ownerBody("w1")), 403, "forbidden")

	// Another session of the same role is the same principal.
	if r := as(workerA2, "POST", lockPath(r0)+"/renew", renewBody("w1", 30)); r.status != 200 {
		t.Errorf("worker-a session2 renew: got %d %s, want 200", r.status, r.raw)
	}
	if r := as(workerA2, "DELETE", lockPath(r0), ownerBody("w1")); r.status != 204 {
		t.Errorf("worker-a session2 release: got %d %s, want 204", r.status, r.raw)
	}
	// Once released, anyone may take it; then the binding follows the new holder.
	if r := as(bob, "POST", lockPath(r0), acquireBody("w1", 30)); r.json["acquired"] != true {
		t.Fatalf("bob acquire after release: got %s", r.raw)
	}
	wantProblem(t, as(workerA1, "DELETE", lockPath(r0), ownerBody("w1")), 403, "forbidden")
}
