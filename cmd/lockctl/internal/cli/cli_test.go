package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ft288/locks/client"
	"github.com/ft288/locks/cmd/lockctl/internal/cli"
	"github.com/ft288/locks/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// lockctl runs cli.Main with LOCKS_ENDPOINT set to endpoint and returns the
// exit code and output.
func lockctl(tb testing.TB, endpoint string, args ...string) (code int, stdout, stderr string) {
	tb.Helper()
	// Safe for concurrent writes: a command lockctl runs writes its
	// output through os/exec's copying goroutine while lockctl writes its
	// own messages (a real run writes to the terminal's files instead).
	var out, errOut syncBuffer
	env := cli.Env{
		Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut,
		Getenv: func(k string) string {
			if k == "LOCKS_ENDPOINT" {
				return endpoint
			}
			return ""
		},
		Environ: []string{"PATH=" + os.Getenv("PATH")},
	}
	code = cli.Main(args, env)
	return code, out.String(), errOut.String()
}

// hold takes resource for owner through the client package.
func hold(tb testing.TB, endpoint, resource, owner string) *client.Lease {
	tb.Helper()
	c, err := client.New(endpoint)
	if err != nil {
		tb.Fatal(err)
	}
	l, err := c.TryAcquire(context.Background(), resource, owner, 30*time.Second)
	if err != nil {
		tb.Fatalf("TryAcquire(%q, %q): %v", resource, owner, err)
	}
	tb.Cleanup(func() { _ = l.Release(context.Background()) })
	return l
}

func TestMainCommands(t *testing.T) {
	t.Parallel()
	tokenRE := `"fencing_token":[1-9][0-9]*`
	tests := []struct {
		name string
		// setup prepares the lock res on the server at url and returns the
		// lease it took, if any.
		setup        func(t *testing.T, url, res string) *client.Lease
		args         func(res string, l *client.Lease) []string
		wantCode     int
		wantStdout   string // regexp
		wantStderr   string // substring
		wantNoStderr bool
		wantLines    int // stderr has this many lines (0: any)
		after        func(t *testing.T, url, res string)
	}{
		{
			name: "AcquireOK",
			args: func(res string, _ *client.Lease) []string {
				return []string{"acquire", res, "--owner", "w1", "--ttl", "30s"}
			},
			wantStdout: `^\{"resource":"[^"]+","owner":"w1",` + tokenRE + `,"acquired_at":"[^"]+","expires_at":"[^"]+"\}\n$`,
			after:      wantOwner("w1"),
		},
		{
			name:       "AcquireLockDelay",
			args:       func(res string, _ *client.Lease) []string { return []string{"acquire", res, "--lock-delay", "30"} },
			wantStdout: `"lock_delay_seconds":30\}\n$`,
			after:      wantLockDelay(30),
		},
		{
			name:  "AcquireLockDelayDuration",
			args:  func(res string, _ *client.Lease) []string { return []string{"acquire", res, "--lock-delay", "1m"} },
			after: wantLockDelay(60),
		},
		{name: "ErrLockDelayFraction", args: func(res string, _ *client.Lease) []string { return []string{"acquire", res, "--lock-delay", "1500ms"} }, wantCode: cli.ExitUsage, wantStderr: "--lock-delay 1.5s: must be whole seconds"},
		{name: "ErrRunLockDelayFraction", args: func(res string, _ *client.Lease) []string {
			return []string{"run", res, "--lock-delay", "0.5s", "--", "true"}
		}, wantCode: cli.ExitUsage, wantStderr: "--lock-delay 500ms: must be whole seconds"},
		{
			name:       "AcquireDefaultOwnerIsUnique",
			args:       func(res string, _ *client.Lease) []string { return []string{"acquire", res} },
			wantStdout: `"owner":"[^":]+:[0-9]+:[0-9a-f]{16}"`,
		},
		{
			name:  "AcquireTTLSeconds",
			args:  func(res string, _ *client.Lease) []string { return []string{"acquire", res, "--ttl", "90"} },
			after: wantTTL(90 * time.Second),
		},
		{
			name:  "AcquireTTLDuration",
			args:  func(res string, _ *client.Lease) []string { return []string{"acquire", res, "--ttl", "1m30s"} },
			after: wantTTL(90 * time.Second),
		},
		{
			name:         "AcquireHeldQuietSuccess",
			setup:        holdBy("holder"),
			args:         func(res string, _ *client.Lease) []string { return []string{"acquire", res, "-E", "0", "-q"} },
			wantStdout:   `^$`,
			wantNoStderr: true,
			after:        wantOwner("holder"),
		},
		{
			name:       "AcquireHeld",
			setup:      holdBy("holder"),
			args:       func(res string, _ *client.Lease) []string { return []string{"acquire", res, "--owner", "w2"} },
			wantCode:   cli.ExitHeld,
			wantStderr: "held by another owner",
			after:      wantOwner("holder"),
		},
		{
			name:     "AcquireWaitRunsOut",
			setup:    holdBy("holder"),
			args:     func(res string, _ *client.Lease) []string { return []string{"acquire", "--wait", "300ms", res} },
			wantCode: cli.ExitHeld,
			// A human message, not "context deadline exceeded".
			wantStderr: "is held by another owner; gave up after waiting 300ms (--wait)\n",
			wantLines:  1,
		},
		{
			name:       "StatusOK",
			setup:      holdBy("holder"),
			args:       func(res string, _ *client.Lease) []string { return []string{"status", res} },
			wantStdout: `"owner":"holder",` + tokenRE,
		},
		{
			name:       "StatusNotFound",
			args:       func(res string, _ *client.Lease) []string { return []string{"status", res} },
			wantCode:   cli.ExitNotFound,
			wantStderr: "Lock not found",
		},
		{
			name:  "RenewOK",
			setup: holdBy("holder"),
			args: func(res string, l *client.Lease) []string {
				return []string{"renew", res, "--owner", "holder", "--ttl", "60s", "--token", itoa(l.FencingToken())}
			},
			wantStdout: `"owner":"holder",` + tokenRE,
		},
		{
			name:       "RenewNotFound",
			args:       func(res string, _ *client.Lease) []string { return []string{"renew", res, "--owner", "w1"} },
			wantCode:   cli.ExitNotFound,
			wantStderr: "Lock not found",
		},
		{
			name:       "RenewOtherOwner",
			setup:      holdBy("holder"),
			args:       func(res string, _ *client.Lease) []string { return []string{"renew", res, "--owner", "w2"} },
			wantCode:   cli.ExitConflict,
			wantStderr: "held by another owner",
		},
		{
			name:  "RenewStaleToken",
			setup: holdBy("holder"),
			args: func(res string, l *client.Lease) []string {
				return []string{"renew", res, "--owner", "holder", "--token", itoa(l.FencingToken() - 1)}
			},
			wantCode:   cli.ExitConflict,
			wantStderr: "Stale fencing token",
		},
		{
			name:  "ReleaseOK",
			setup: holdBy("holder"),
			args: func(res string, l *client.Lease) []string {
				return []string{"release", res, "--owner", "holder", "--token", itoa(l.FencingToken())}
			},
			wantStdout: `^\{"released":true,"resource":"[^"]+"\}\n$`,
			after:      wantFree,
		},
		{
			name:       "ReleaseOtherOwner",
			setup:      holdBy("holder"),
			args:       func(res string, _ *client.Lease) []string { return []string{"release", res, "--owner", "w2"} },
			wantCode:   cli.ExitConflict,
			wantStderr: "held by another owner",
			after:      wantOwner("holder"),
		},
		{
			name:     "ReleaseNotFound",
			args:     func(res string, _ *client.Lease) []string { return []string{"release", res, "--owner", "w1"} },
			wantCode: cli.ExitNotFound,
		},
		{
			name:       "RunPassesExitStatus",
			args:       func(res string, _ *client.Lease) []string { return []string{"run", res, "--", "sh", "-c", "exit 7"} },
			wantCode:   7,
			wantStdout: `^$`,
			after:      wantFree,
		},
		{
			name: "RunExportsLease",
			args: func(res string, _ *client.Lease) []string {
				return []string{"run", res, "--owner", "w9", "--ttl", "5s", "sh", "-c", `echo "$LOCK_RESOURCE|$LOCK_OWNER|$LOCK_FENCING_TOKEN"`}
			},
			wantStdout: `^lockctl-TestMainCommands_RunExportsLease-[0-9]+\|w9\|[1-9][0-9]{9,}\n$`,
			after:      wantFree,
		},
		{
			name:       "RunHeld",
			setup:      holdBy("holder"),
			args:       func(res string, _ *client.Lease) []string { return []string{"run", res, "--", "sh", "-c", "echo ran"} },
			wantCode:   cli.ExitHeld,
			wantStdout: `^$`,
			wantStderr: "not running the command",
		},
		{
			name:  "RunTTLSeconds",
			args:  func(res string, _ *client.Lease) []string { return []string{"run", res, "--ttl", "5", "--", "true"} },
			after: wantFree,
		},
		{
			// cron: another host has it, so there is nothing to do.
			name:  "RunHeldQuietSuccess",
			setup: holdBy("holder"),
			args: func(res string, _ *client.Lease) []string {
				return []string{"run", res, "--held-exit", "0", "--quiet", "--", "sh", "-c", "echo ran"}
			},
			wantStdout:   `^$`,
			wantNoStderr: true,
			after:        wantOwner("holder"),
		},
		{
			name:  "RunHeldExitCode",
			setup: holdBy("holder"),
			args: func(res string, _ *client.Lease) []string {
				return []string{"run", res, "-E", "9", "--", "sh", "-c", "echo ran"}
			},
			wantCode:   9,
			wantStdout: `^$`,
			wantStderr: "held by another owner",
		},
		{
			name: "RunCommandNotFound",
			args: func(res string, _ *client.Lease) []string {
				return []string{"run", res, "--", "no-such-command-lockctl"}
			},
			wantCode:   127,
			wantStderr: "no-such-command-lockctl",
			after:      wantFree,
		},
		{
			name: "RunCommandNotExecutable",
			args: func(res string, _ *client.Lease) []string {
				return []string{"run", res, "--", "/etc/passwd"}
			},
			wantCode:   126,
			wantStderr: "/etc/passwd",
			after:      wantFree,
		},
		{
			name: "ElectOnce",
			args: func(res string, _ *client.Lease) []string {
				return []string{"elect", res, "--once", "--", "sh", "-c", `echo "leading $LOCK_RESOURCE $LOCK_FENCING_TOKEN"`}
			},
			wantStdout:   `^leading \S+ [1-9][0-9]*\n$`,
			wantNoStderr: true,
			after:        wantFree,
		},
		{
			name:     "ElectCommandStatus",
			args:     func(res string, _ *client.Lease) []string { return []string{"elect", res, "--", "sh", "-c", "exit 7"} },
			wantCode: 7,
			after:    wantFree,
		},
		{
			name: "WatchServiceDown",
			args: func(res string, _ *client.Lease) []string {
				return []string{"watch", res, "--endpoint", "http://127.0.0.1:1"}
			},
			wantCode:   cli.ExitError,
			wantStderr: "connection refused",
		},
		{
			name: "ServiceDown",
			args: func(res string, _ *client.Lease) []string {
				return []string{"status", res, "--endpoint", "http://127.0.0.1:1"}
			},
			wantCode:   cli.ExitError,
			wantStderr: "connection refused",
		},
		{name: "ErrNoArgs", args: func(string, *client.Lease) []string { return nil }, wantCode: cli.ExitUsage},
		{name: "ErrUnknownCommand", args: func(string, *client.Lease) []string { return []string{"grab", "x"} }, wantCode: cli.ExitUsage, wantStderr: `unknown command "grab"`},
		{name: "ErrMissingResource", args: func(string, *client.Lease) []string { return []string{"status"} }, wantCode: cli.ExitUsage, wantStderr: "missing RESOURCE"},
		{name: "ErrUnknownFlag", args: func(res string, _ *client.Lease) []string { return []string{"status", res, "--nope"} }, wantCode: cli.ExitUsage, wantStderr: "nope"},
		{name: "ErrTTLFraction", args: func(res string, _ *client.Lease) []string { return []string{"acquire", res, "--ttl", "1500ms"} }, wantCode: cli.ExitUsage, wantStderr: "whole seconds"},
		{name: "ErrTTLUnit", args: func(res string, _ *client.Lease) []string { return []string{"run", res, "--ttl", "90x", "--", "true"} }, wantCode: cli.ExitUsage, wantStderr: "want seconds (90) or a duration"},
		{name: "ErrTTLNegative", args: func(res string, _ *client.Lease) []string { return []string{"acquire", res, "--ttl", "-5"} }, wantCode: cli.ExitUsage, wantStderr: "out of range"},
		{name: "ErrGraceLongerThanLease", args: func(res string, _ *client.Lease) []string {
			return []string{"run", res, "--ttl", "3", "--grace", "10", "--", "true"}
		}, wantCode: cli.ExitUsage, wantStderr: "--grace 10s does not fit in a 3s lease"},
		{name: "ErrHeldExitRange", args: func(res string, _ *client.Lease) []string { return []string{"run", res, "-E", "256", "--", "true"} }, wantCode: cli.ExitUsage, wantStderr: "--held-exit 256"},
		{name: "ErrUsageNamesCommandHelp", args: func(res string, _ *client.Lease) []string { return []string{"renew", res} }, wantCode: cli.ExitUsage, wantStderr: "Run 'lockctl renew --help' for usage."},
		{name: "ErrReleaseWithoutOwner", args: func(res string, _ *client.Lease) []string { return []string{"release", res} }, wantCode: cli.ExitUsage, wantStderr: "--owner is required"},
		{name: "ErrRunWithoutCommand", args: func(res string, _ *client.Lease) []string { return []string{"run", res, "--ttl", "5s"} }, wantCode: cli.ExitUsage, wantStderr: "missing the command"},
		{name: "ErrElectWithoutCommand", args: func(res string, _ *client.Lease) []string { return []string{"elect", res, "--once"} }, wantCode: cli.ExitUsage, wantStderr: "missing the command to run: lockctl elect NAME"},
		{name: "ErrWatchExtraArgs", args: func(res string, _ *client.Lease) []string { return []string{"watch", res, "other"} }, wantCode: cli.ExitUsage, wantStderr: "unexpected arguments"},
		{name: "ErrWatchSlash", args: func(string, *client.Lease) []string { return []string{"watch", "a/b"} }, wantCode: cli.ExitUsage, wantStderr: "resource must be non-empty"},
		{
			name:       "ElectHelp",
			args:       func(string, *client.Lease) []string { return []string{"elect", "--help"} },
			wantStdout: `(?s)^Usage: lockctl elect NAME .*-- CMD.*campaigns again.*--once\n.*--ttl SECONDS\n`,
		},
		{name: "ErrExtraArgs", args: func(res string, _ *client.Lease) []string { return []string{"status", res, "other"} }, wantCode: cli.ExitUsage, wantStderr: "unexpected arguments"},
		{name: "Help", args: func(string, *client.Lease) []string { return []string{"help"} }, wantStdout: `(?s)Exit codes:.*76 `},
		{
			name:       "RunHelp",
			args:       func(string, *client.Lease) []string { return []string{"run", "--help"} },
			wantStdout: `(?s)^Usage: lockctl run RESOURCE .*-- CMD.*process group.*Flags:\n.*-E, --held-exit CODE\n.*-q, --quiet\n.*--ttl SECONDS\n.*Flags of every command:\n  --endpoint URL`,
		},
		{
			name:       "HelpRun",
			args:       func(string, *client.Lease) []string { return []string{"help", "run"} },
			wantStdout: `(?s)^Usage: lockctl run RESOURCE .*--grace SECONDS`,
		},
		{
			name:  "LsTable",
			setup: holdBy("holder"),
			args:  func(res string, _ *client.Lease) []string { return []string{"ls", res} },
			wantStdout: `^RESOURCE +OWNER +TOKEN +EXPIRES +DELAY +PRINCIPAL\n` +
				`\S+ +holder +[1-9][0-9]* +[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z +- +-\n$`,
			wantNoStderr: true,
		},
		{
			name:         "LsJSON",
			setup:        holdBy("holder"),
			args:         func(res string, _ *client.Lease) []string { return []string{"ls", "--json", res} },
			wantStdout:   `^\[\{"resource":"[^"]+","owner":"holder",` + tokenRE + `,"acquired_at":"[^"]+","expires_at":"[^"]+"\}\]\n$`,
			wantNoStderr: true,
		},
		{
			name:       "LsNone",
			args:       func(res string, _ *client.Lease) []string { return []string{"ls", "--json", res} },
			wantStdout: `^\[\]\n$`,
		},
		{
			name:       "LsHeaderOnly",
			args:       func(res string, _ *client.Lease) []string { return []string{"ls", res} },
			wantStdout: `^RESOURCE +OWNER +TOKEN +EXPIRES +DELAY +PRINCIPAL\n$`,
		},
		{
			name:  "ForceReleaseOK",
			setup: holdBy("holder"),
			args: func(res string, _ *client.Lease) []string {
				return []string{"force-release", res, "--reason", "holder is gone"}
			},
			// free_at once the service says when others may take the lock.
			wantStdout: `^\{"resource":"[^"]+","owner":"holder",` + tokenRE + `,"acquired_at":"[^"]+","expires_at":"[^"]+","reason":"holder is gone","immediate":false(,"free_at":"[^"]+")?\}\n$`,
			after:      wantFree,
		},
		{
			name:       "ForceReleaseNotFound",
			args:       func(res string, _ *client.Lease) []string { return []string{"force-release", res, "--reason", "r"} },
			wantCode:   cli.ExitNotFound,
			wantStderr: "Lock not found",
		},
		{name: "ErrForceReleaseWithoutReason", args: func(res string, _ *client.Lease) []string { return []string{"force-release", res} }, wantCode: cli.ExitUsage, wantStderr: "--reason is required"},
		{name: "ErrLsExtraArgs", args: func(res string, _ *client.Lease) []string { return []string{"ls", res, "other"} }, wantCode: cli.ExitUsage, wantStderr: "unexpected arguments"},
		{
			name:       "LsHelp",
			args:       func(string, *client.Lease) []string { return []string{"help", "ls"} },
			wantStdout: `(?s)^Usage: lockctl ls \[PREFIX\].*--json.*--limit N`,
		},
		{
			name:       "ForceReleaseHelp",
			args:       func(string, *client.Lease) []string { return []string{"force-release", "--help"} },
			wantStdout: `(?s)^Usage: lockctl force-release RESOURCE --reason TEXT.*audit log`,
		},
		{
			name:       "AcquireHelp",
			args:       func(string, *client.Lease) []string { return []string{"acquire", "-h"} },
			wantStdout: `(?s)^Usage: lockctl acquire RESOURCE .*--owner OWNER.*--wait SECONDS`,
		},
		{
			name:       "Version",
			args:       func(string, *client.Lease) []string { return []string{"version"} },
			wantStdout: `^lockctl (\(devel\)|commit [0-9a-f]{12}(\+dirty)?|v[0-9]\S*) \(go[0-9.]+\S* [a-z0-9]+/[a-z0-9]+\)\n$`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := testenv.Start(t, testenv.Options{})
			res := uniqueName(t)
			var l *client.Lease
			if tt.setup != nil {
				l = tt.setup(t, srv.URL, res)
			}
			code, stdout, stderr := lockctl(t, srv.URL, tt.args(res, l)...)
			if code != tt.wantCode {
				t.Errorf("exit code: got %d, want %d (stderr %q)", code, tt.wantCode, stderr)
			}
			if tt.wantStdout != "" && !regexp.MustCompile(tt.wantStdout).MatchString(stdout) {
				t.Errorf("stdout: got %q, want a match for %q", stdout, tt.wantStdout)
			}
			if !strings.Contains(stderr, tt.wantStderr) {
				t.Errorf("stderr: got %q, want it to contain %q", stderr, tt.wantStderr)
			}
			if n := strings.Count(stderr, "\n"); tt.wantLines > 0 && n != tt.wantLines {
				t.Errorf("stderr: got %d lines (%q), want %d", n, stderr, tt.wantLines)
			}
			if tt.wantNoStderr && stderr != "" {
				t.Errorf("stderr: got %q, want nothing", stderr)
			}
			if strings.HasPrefix(stdout, "{") {
				var v map[string]any
				if err := json.Unmarshal([]byte(stdout), &v); err != nil {
					t.Errorf("stdout %q is not JSON: %v", stdout, err)
				}
			}
			if tt.after != nil {
				tt.after(t, srv.URL, res)
			}
		})
	}
}

func TestMainEndpointFlagOverridesEnv(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	res := uniqueName(t)
	hold(t, srv.URL, res, "holder")
	code, stdout, stderr := lockctl(t, "http://127.0.0.1:1", "status", "--endpoint", srv.URL, res)
	if code != cli.ExitOK || !strings.Contains(stdout, `"owner":"holder"`) {
		t.Errorf("status with --endpoint: got %d, %q, %q, want 0 and the holder", code, stdout, stderr)
	}
}

// TestRunSigV4NeedsRegion is not parallel: it sets the environment the AWS
// default chain reads.
func TestRunSigV4NeedsRegion(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "none"))
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	t.Setenv("AWS_PROFILE", "")
	code, _, stderr := lockctl(t, "http://127.0.0.1:1", "status", "x", "--sigv4")
	if code != cli.ExitError || !strings.Contains(stderr, "--sigv4") || !strings.Contains(stderr, "region") {
		t.Errorf("status --sigv4 without a region: got %d, %q, want %d and a message about the region", code, stderr, cli.ExitError)
	}
}

var seq atomic.Int64

// uniqueName returns a lock name for the test, new with every call, so that
// -count=N runs against one dynalite do not meet each other's leases.
func uniqueName(tb testing.TB) string {
	return fmt.Sprintf("lockctl-%s-%d%d", strings.ReplaceAll(tb.Name(), "/", "_"), time.Now().UnixNano()%1e9, seq.Add(1))
}

func holdBy(owner string) func(t *testing.T, url, res string) *client.Lease {
	return func(t *testing.T, url, res string) *client.Lease { return hold(t, url, res, owner) }
}

func wantOwner(owner string) func(t *testing.T, url, res string) {
	return func(t *testing.T, url, res string) {
		t.Helper()
		code, stdout, stderr := lockctl(t, url, "status", res)
		if code != 0 || !strings.Contains(stdout, `"owner":"`+owner+`"`) {
			t.Errorf("status afterwards: got %d, %q, %q, want the lock held by %q", code, stdout, stderr, owner)
		}
	}
}

// wantTTL checks that the live lease on res lasts ttl.
func wantTTL(ttl time.Duration) func(t *testing.T, url, res string) {
	return func(t *testing.T, url, res string) {
		t.Helper()
		c, err := client.New(url)
		if err != nil {
			t.Fatal(err)
		}
		l, err := c.Status(context.Background(), res)
		if err != nil {
			t.Fatalf("status afterwards: %v", err)
		}
		if got := l.ExpiresAt.Sub(l.AcquiredAt); got != ttl {
			t.Errorf("lease length: got %s, want %s", got, ttl)
		}
	}
}

// wantLockDelay checks that the live lease on res has a lock-delay of secs.
func wantLockDelay(secs int64) func(t *testing.T, url, res string) {
	return func(t *testing.T, url, res string) {
		t.Helper()
		c, err := client.New(url)
		if err != nil {
			t.Fatal(err)
		}
		l, err := c.Status(context.Background(), res)
		if err != nil {
			t.Fatalf("status afterwards: %v", err)
		}
		if l.LockDelaySeconds != secs {
			t.Errorf("lock-delay: got %d s, want %d s", l.LockDelaySeconds, secs)
		}
	}
}

func wantFree(t *testing.T, url, res string) {
	t.Helper()
	if code, stdout, _ := lockctl(t, url, "status", res); code != cli.ExitNotFound {
		t.Errorf("status afterwards: got %d, %q, want %d (released)", code, stdout, cli.ExitNotFound)
	}
}

func itoa(i int64) string { return strconv.FormatInt(i, 10) }

// TestLsPrefixAndLimit: ls lists exactly the leases under its prefix, and
// --limit caps how many.
func TestLsPrefixAndLimit(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	prefix := uniqueName(t) + ":"
	for _, n := range []string{"a", "b", "c"} {
		hold(t, srv.URL, prefix+n, "holder-"+n)
	}
	hold(t, srv.URL, uniqueName(t)+"-outside", "holder")
	for _, tc := range []struct {
		args []string
		want int
	}{{[]string{"ls", "--json", prefix}, 3}, {[]string{"ls", prefix, "--json", "--limit", "2"}, 2}} {
		code, stdout, stderr := lockctl(t, srv.URL, tc.args...)
		var locks []map[string]any
		if err := json.Unmarshal([]byte(stdout), &locks); code != cli.ExitOK || err != nil {
			t.Fatalf("%v: got %d %q %q (%v)", tc.args, code, stdout, stderr, err)
		}
		if len(locks) != tc.want {
			t.Errorf("%v: got %d leases, want %d: %s", tc.args, len(locks), tc.want, stdout)
		}
		for _, l := range locks {
			if r, _ := l["resource"].(string); !strings.HasPrefix(r, prefix) || l["owner"] != "holder-"+r[len(prefix):] {
				t.Errorf("%v: listed %v, not one of the prefix's leases", tc.args, l)
			}
		}
	}
}
