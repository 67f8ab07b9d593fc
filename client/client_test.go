package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ft288/locks/client"
)

func TestNew(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		url     string
		opts    []client.Option
		wantErr bool
	}{
		{name: "OK", url: "http://127.0.0.1:8080"},
		{name: "OKStagePath", url: "https://abc.execute-api.eu-west-1.amazonaws.com/prod/"},
		{name: "ErrNoScheme", url: "127.0.0.1:8080", wantErr: true},
		{name: "ErrFTP", url: "ftp://example.com", wantErr: true},
		{name: "ErrQuery", url: "http://example.com/?a=b", wantErr: true},
		{name: "ErrBackoff", url: "http://example.com", opts: []client.Option{client.WithBackoff(time.Second, time.Millisecond)}, wantErr: true},
		{name: "ErrSigV4NoRegion", url: "http://example.com", opts: []client.Option{client.WithSigV4("", nil)}, wantErr: true},
		{name: "ErrNilHTTPClient", url: "http://example.com", opts: []client.Option{client.WithHTTPClient(nil)}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := client.New(tt.url, tt.opts...)
			if got := err != nil; got != tt.wantErr {
				t.Errorf("New(%q): got error %v, want error %t", tt.url, err, tt.wantErr)
			}
		})
	}
}

func TestTryAcquireRejectsArgsBeforeSending(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1) }))
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL)
	tests := []struct {
		name     string
		resource string
		owner    string
		ttl      time.Duration
	}{
		{"ErrTTLFraction", "r", "w1", 1500 * time.Millisecond},
		{"ErrTTLNegative", "r", "w1", -time.Second},
		{"ErrTTLSubSecond", "r", "w1", 999 * time.Millisecond},
		{"ErrOwnerBlank", "r", "  ", time.Second},
		{"ErrResourceEmpty", "", "w1", time.Second},
		{"ErrResourceSlash", "a/b", "w1", time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, call := range []func() error{
				func() error { _, err := c.TryAcquire(context.Background(), tt.resource, tt.owner, tt.ttl); return err },
				func() error { _, err := c.Acquire(context.Background(), tt.resource, tt.owner, tt.ttl); return err },
				func() error {
					_, err := c.Renew(context.Background(), tt.resource, tt.owner, tt.ttl, 0)
					return err
				},
			} {
				if err := call(); !errors.Is(err, client.ErrValidation) {
					t.Errorf("got %v, want an error matching ErrValidation", err)
				}
			}
			if tt.resource != "r" {
				if _, err := c.Status(context.Background(), tt.resource); !errors.Is(err, client.ErrValidation) {
					t.Errorf("status: got %v, want ErrValidation", err)
				}
				if err := c.Release(context.Background(), tt.resource, "w1", 0); !errors.Is(err, client.ErrValidation) {
					t.Errorf("release: got %v, want ErrValidation", err)
				}
			}
		})
	}
	if got := calls.Load(); got != 0 {
		t.Errorf("requests sent: got %d, want 0", got)
	}
}
