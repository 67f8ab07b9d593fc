package awsauth_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/ft288/locks/client"
	"github.com/ft288/locks/client/awsauth"
)

// verifier answers like the lock service when a request's SigV4 signature
// is the one creds and region give (signed again from what arrived, with
// the request's own X-Amz-Date), and 403 {"message"} otherwise, as API
// Gateway does. client's TestSigV4 checks the signing itself in detail.
func verifier(tb testing.TB, creds aws.Credentials, region string) *httptest.Server {
	tb.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		sum := sha256.Sum256(body)
		hash := hex.EncodeToString(sum[:])
		at, _ := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
		again, _ := http.NewRequest(r.Method, "http://"+r.Host+r.RequestURI, strings.NewReader(string(body)))
		for _, h := range []string{"Content-Type", "User-Agent", "Accept", "X-Amz-Date", "X-Amz-Content-Sha256", "X-Amz-Security-Token"} {
			if v := r.Header.Values(h); v != nil {
				again.Header[h] = v
			}
		}
		err := v4.NewSigner().SignHTTP(context.Background(), creds, again, hash, client.SigV4Service, region, at)
		if got, want := r.Header.Get("Authorization"), again.Header.Get("Authorization"); err != nil || got == "" || got != want {
			w.WriteHeader(http.StatusForbidden)
			msg, _ := json.Marshal(fmt.Sprintf("signature: got %q, want %q (%v)", got, want, err))
			fmt.Fprintf(w, `{"message":%s}`, msg)
			return
		}
		lock := `{"resource":"r","owner":"w1","fencing_token":7,"acquired_at":"2026-12-02T13:20:33.748Z","expires_at":"2026-12-02T13:21:03.748Z"}`
		if r.Method == http.MethodPost {
			lock = `{"acquired":true,"lock":` + lock + `}`
		}
		fmt.Fprint(w, lock)
	}))
	tb.Cleanup(srv.Close)
	return srv
}

// TestSigV4FromDefaultChain is not parallel: it sets the environment the
// default credential chain reads.
func TestSigV4FromDefaultChain(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDFROMENV")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret-from-env")
	t.Setenv("AWS_SESSION_TOKEN", "token-from-env")
	t.Setenv("AWS_REGION", "eu-central-1")
	t.Setenv("AWS_DEFAULT_REGION", "")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	if err := os.WriteFile(filepath.Join(dir, "config"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	creds := aws.Credentials{AccessKeyID: "AKIDFROMENV", SecretAccessKey: "secret-from-env", SessionToken: "token-from-env"}

	tests := []struct {
		name       string
		env        string // AWS_REGION
		region     string // passed to SigV4FromDefaultChain
		wantRegion string // "": an error
	}{
		{name: "RegionFromEnv", env: "eu-central-1", wantRegion: "eu-central-1"},
		{name: "RegionOverride", env: "eu-central-1", region: "ap-southeast-2", wantRegion: "ap-southeast-2"},
		{name: "ErrNoRegion"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("AWS_REGION", tt.env)
			opt, err := awsauth.SigV4FromDefaultChain(context.Background(), tt.region)
			if tt.wantRegion == "" {
				if err == nil || !strings.Contains(err.Error(), "no region") {
					t.Fatalf("SigV4FromDefaultChain: got %v, want a missing-region error", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("SigV4FromDefaultChain: %v", err)
			}
			c, err := client.New(verifier(t, creds, tt.wantRegion).URL, opt)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if _, err := c.Status(ctx, "r"); err != nil {
				t.Errorf("Status: %v", err)
			}
			l, err := c.TryAcquire(ctx, "r", "w1", 30*time.Second)
			if err != nil {
				t.Fatalf("TryAcquire: %v", err)
			}
			if l.FencingToken() != 7 {
				t.Errorf("FencingToken: got %d, want 7", l.FencingToken())
			}
		})
	}
}

// TestFromEnv is not parallel: it sets the environment. The client goes to
// LOCKS_ENDPOINT and signs with the default chain in AWS_REGION, unless
// LOCKS_SIGV4 turns signing off.
func TestFromEnv(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDFROMENV")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret-from-env")
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	creds := aws.Credentials{AccessKeyID: "AKIDFROMENV", SecretAccessKey: "secret-from-env"}
	srv := verifier(t, creds, "eu-west-1")
	t.Setenv("LOCKS_ENDPOINT", srv.URL)

	tests := []struct {
		name       string
		sigv4      string // LOCKS_SIGV4
		region     string // AWS_REGION
		wantSigned bool
		wantErr    string // FromEnv's error
	}{
		{name: "SignsByDefault", region: "eu-west-1", wantSigned: true},
		{name: "SignsWithSigV4", sigv4: "1", region: "eu-west-1", wantSigned: true},
		{name: "SigV4Off", sigv4: "false"},
		{name: "ErrNoRegion", wantErr: "no region"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("LOCKS_SIGV4", tt.sigv4)
			t.Setenv("AWS_REGION", tt.region)
			c, err := awsauth.FromEnv(context.Background())
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("FromEnv: got %v, want an error saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("FromEnv: %v", err)
			}
			_, err = c.Status(context.Background(), "r")
			var p *client.ProblemError
			switch {
			case tt.wantSigned && err != nil:
				t.Errorf("Status: %v, want the verifier's answer to a signed request", err)
			case !tt.wantSigned && (!errors.As(err, &p) || p.Status != 403):
				t.Errorf("Status: got %v, want 403 for an unsigned request", err)
			}
		})
	}
}
