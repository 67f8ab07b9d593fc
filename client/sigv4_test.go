package client_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/ft288/locks/client"
)

// sigv4Verifier is a test server that checks every request's SigV4
// signature the way API Gateway would: it rebuilds the request from what
// arrived (only the headers the client says it signed), signs it again with
// the SDK's signer, the same credentials and the request's own X-Amz-Date,
// and compares the Authorization headers. It answers 403 {"message"} on a
// mismatch, like API Gateway.
type sigv4Verifier struct {
	creds  aws.Credentials
	region string

	mu       sync.Mutex
	verified int
	failures []string
}

func (v *sigv4Verifier) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if msg := v.verify(r); msg != "" {
		v.mu.Lock()
		v.failures = append(v.failures, msg)
		v.mu.Unlock()
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintf(w, `{"message":%q}`, msg)
		return
	}
	v.mu.Lock()
	v.verified++
	v.mu.Unlock()
	lock := `{"resource":"r","owner":"w1","fencing_token":1796217633748613,"acquired_at":"2026-12-02T13:20:33.748Z","expires_at":"2026-12-02T13:21:03.748Z"}`
	switch {
	case r.Method == http.MethodDelete:
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodGet:
		fmt.Fprint(w, lock)
	case strings.HasSuffix(r.URL.Path, "/renew"):
		fmt.Fprintf(w, `{"renewed":true,"lock":%s}`, lock)
	default:
		fmt.Fprintf(w, `{"acquired":true,"lock":%s}`, lock)
	}
}

func (v *sigv4Verifier) verify(r *http.Request) string {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return "read body: " + err.Error()
	}
	sum := sha256.Sum256(body)
	hash := hex.EncodeToString(sum[:])
	if got := r.Header.Get("X-Amz-Content-Sha256"); got != hash {
		return fmt.Sprintf("payload hash: got %q, want %q (sha256 of the body)", got, hash)
	}
	auth := r.Header.Get("Authorization")
	var signed []string
	for _, part := range strings.Split(strings.TrimPrefix(auth, "AWS4-HMAC-SHA256 "), ", ") {
		if h, ok := strings.CutPrefix(part, "SignedHeaders="); ok {
			signed = strings.Split(h, ";")
		}
	}
	if !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 ") || len(signed) == 0 {
		return fmt.Sprintf("Authorization: got %q, want a SigV4 header", auth)
	}
	for _, h := range []string{"host", "x-amz-date", "x-amz-content-sha256", "x-amz-security-token"} {
		if !contains(signed, h) {
			return fmt.Sprintf("signed headers %v lack %s", signed, h)
		}
	}
	if r.Method != http.MethodGet && !contains(signed, "content-type") {
		return fmt.Sprintf("signed headers %v lack content-type", signed)
	}
	at, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return "X-Amz-Date: " + err.Error()
	}
	if d := time.Since(at); d < -time.Minute || d > 5*time.Minute {
		return fmt.Sprintf("X-Amz-Date %s is %s off", at, d)
	}
	copyReq, err := http.NewRequest(r.Method, "http://"+r.Host+r.RequestURI, strings.NewReader(string(body)))
	if err != nil {
		return "rebuild request: " + err.Error()
	}
	for _, h := range signed {
		if h != "host" && h != "content-length" {
			copyReq.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
		}
	}
	copyReq.Header.Del("Authorization")
	if err := v4.NewSigner().SignHTTP(context.Background(), v.creds, copyReq, hash, "execute-api", v.region, at); err != nil {
		return "sign copy: " + err.Error()
	}
	if got, want := auth, copyReq.Header.Get("Authorization"); got != want {
		return fmt.Sprintf("Authorization: got %q, want %q", got, want)
	}
	return ""
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// static provides creds, as credentials.StaticCredentialsProvider does
// (a module this one does not need otherwise).
func static(creds aws.Credentials) aws.CredentialsProvider {
	return aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) { return creds, nil })
}

func TestSigV4(t *testing.T) {
	t.Parallel()
	creds := aws.Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", SessionToken: "session-token"}
	tests := []struct {
		name     string
		opts     []client.Option
		wantOK   bool
		wantFail string // part of the verifier's complaint
	}{
		{
			name:   "OK",
			opts:   []client.Option{client.WithSigV4("eu-west-1", static(creds))},
			wantOK: true,
		},
		{
			name: "ErrWrongSecret",
			opts: []client.Option{client.WithSigV4("eu-west-1", static(aws.Credentials{
				AccessKeyID: creds.AccessKeyID, SecretAccessKey: "not-the-secret", SessionToken: creds.SessionToken}))},
			wantFail: "Authorization: got",
		},
		{
			name:     "ErrWrongRegion",
			opts:     []client.Option{client.WithSigV4("us-east-1", static(creds))},
			wantFail: "Authorization: got",
		},
		{
			name:     "ErrUnsigned",
			wantFail: "payload hash",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := &sigv4Verifier{creds: creds, region: "eu-west-1"}
			srv := httptest.NewServer(v)
			t.Cleanup(srv.Close)
			c := newClient(t, srv.URL+"/prod", tt.opts...)
			checkSignedCalls(t, c, v, tt.wantOK, tt.wantFail)
		})
	}
}

// checkSignedCalls makes one call of each kind, with a resource name that
// needs escaping, and checks the verifier accepted all or rejected all.
func checkSignedCalls(tb testing.TB, c *client.Client, v *sigv4Verifier, wantOK bool, wantFail string) {
	tb.Helper()
	ctx := context.Background()
	res := "reports: nightly é&+"
	calls := map[string]func() error{
		"TryAcquire": func() error { _, err := c.TryAcquire(ctx, res, "w1", 30*time.Second); return err },
		"Status":     func() error { _, err := c.Status(ctx, res); return err },
		"Renew":      func() error { _, err := c.Renew(ctx, res, "w1", 30*time.Second, 7); return err },
		"Release":    func() error { return c.Release(ctx, res, "w1", 7) },
	}
	for name, call := range calls {
		err := call()
		if wantOK && err != nil {
			tb.Errorf("%s: %v", name, err)
		}
		var p *client.ProblemError
		if !wantOK && (!errors.As(err, &p) || p.Status != 403 || errors.Is(err, client.ErrForbidden)) {
			tb.Errorf("%s: got %v, want API Gateway's 403 that is not ErrForbidden", name, err)
		}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if wantOK {
		if v.verified != len(calls) || len(v.failures) != 0 {
			tb.Errorf("verified: got %d (failures %q), want %d", v.verified, v.failures, len(calls))
		}
		return
	}
	if v.verified != 0 || len(v.failures) != len(calls) {
		tb.Errorf("verified %d and rejected %d, want 0 and %d", v.verified, len(v.failures), len(calls))
	}
	for _, f := range v.failures {
		if !strings.Contains(f, wantFail) {
			tb.Errorf("verifier complaint: got %q, want it to mention %q", f, wantFail)
		}
	}
}
