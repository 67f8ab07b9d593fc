// Package cli is lockctl, the command-line client of the lock service: its
// subcommands, flags, exit codes and the supervision of a command run under
// a lock. cmd/lockctl only calls Main.
package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/ft288/locks/client"
)

// Exit codes of lockctl. `run` otherwise exits with its command's status
// (128+n when the command was killed by signal n).
const (
	// ExitOK means success.
	ExitOK = 0
	// ExitError means any failure not listed below: the service could not
	// be reached, answered an error, or the command could not be started.
	ExitError = 1
	// ExitUsage means bad flags or arguments.
	ExitUsage = 2
	// ExitNotFound means there is no live lease (status, renew, release).
	ExitNotFound = 3
	// ExitConflict means the lease belongs to another owner, or to a newer
	// lease of the same owner (renew, release).
	ExitConflict = 4
	// ExitHeld means the lock was held by another owner and could not be
	// had within --wait (acquire, run); EX_TEMPFAIL: try again later.
	ExitHeld = 75
	// ExitLeaseLost means `run` lost its lease while the command ran, and
	// stopped the command.
	ExitLeaseLost = 76
)

// DefaultEndpoint is the service lockctl talks to without --endpoint or
// LOCKS_ENDPOINT: the local runner of `make run`.
const DefaultEndpoint = "http://127.0.0.1:8080"

// requestTimeout bounds single requests that are not part of a wait.
const requestTimeout = 30 * time.Second

// Env is what lockctl gets from its process: standard streams, environment
// variables (Getenv) and the environment handed to a command (Environ).
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Getenv         func(string) string
	Environ        []string
}

const usage = `Usage: lockctl COMMAND RESOURCE [flags]

Commands:
  acquire RESOURCE [--ttl 30s] [--wait 0s] [--owner X]
        take the lock and print the lease as JSON
  status RESOURCE
        print the live lease as JSON
  renew RESOURCE --owner X [--ttl 30s] [--token N]
        extend the live lease and print it as JSON
  release RESOURCE --owner X [--token N]
        end the live lease
  run RESOURCE [--ttl 30s] [--wait 0s] [--owner X] [--grace 10s] -- CMD [ARGS...]
        take the lock, run CMD while renewing it every ttl/3, release it
        when CMD exits and exit with CMD's status. CMD gets LOCK_RESOURCE,
        LOCK_OWNER and LOCK_FENCING_TOKEN in its environment, and runs in its
        own process group. SIGINT, SIGTERM and SIGHUP are forwarded to it. If
        the lease is lost, CMD's process group gets SIGTERM, then SIGKILL
        after --grace, and lockctl exits 76.

Flags of every command:
  --endpoint URL   the lock service (env LOCKS_ENDPOINT, default ` + DefaultEndpoint + `)
  --sigv4          sign requests with AWS SigV4 (IAM auth), credentials from
                   the AWS default chain (env, profile, SSO, role)
  --region R       the API's AWS region for --sigv4 (default: env AWS_REGION
                   or the profile's region)

--owner defaults to HOST:PID:RANDOM, unique per process. --ttl is whole
seconds. --wait 0s tries once.

Exit codes:
  0   success (run: the command's own status)
  1   error: service unreachable, unexpected answer, command not started
  2   usage error
  3   no live lease (status, renew, release)
  4   the lease belongs to another owner or to a newer lease (renew, release)
  75  the lock is held by another owner and --wait ran out (acquire, run)
  76  run: the lease was lost while the command ran; the command was stopped
  126, 127  run: the command could not be executed or was not found
`

// Main runs lockctl with args (without the program name) and returns the
// exit code.
func Main(args []string, env Env) int {
	if len(args) == 0 {
		fmt.Fprint(env.Stderr, usage)
		return ExitUsage
	}
	switch args[0] {
	case "acquire":
		return acquireCmd(args[1:], env)
	case "status":
		return statusCmd(args[1:], env)
	case "renew":
		return renewCmd(args[1:], env)
	case "release":
		return releaseCmd(args[1:], env)
	case "run":
		return runCmd(args[1:], env)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(env.Stdout, usage)
		return ExitOK
	}
	fmt.Fprintf(env.Stderr, "lockctl: unknown command %q\n\n%s", args[0], usage)
	return ExitUsage
}

// common holds the flags every command has.
type common struct {
	endpoint string
	sigv4    bool
	region   string
}

func newFlagSet(name string, env Env) (*flag.FlagSet, *common) {
	fs := flag.NewFlagSet("lockctl "+name, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	fs.Usage = func() { fmt.Fprintln(env.Stderr, "Run 'lockctl help' for usage.") }
	c := &common{}
	endpoint := env.Getenv("LOCKS_ENDPOINT")
	if endpoint == "" {
		endpoint = DefaultEndpoint
	}
	fs.StringVar(&c.endpoint, "endpoint", endpoint, "the lock service's base URL")
	fs.BoolVar(&c.sigv4, "sigv4", false, "sign requests with AWS SigV4")
	fs.StringVar(&c.region, "region", env.Getenv("AWS_REGION"), "the API's AWS region for --sigv4")
	return fs, c
}

func (c *common) client(ctx context.Context) (*client.Client, error) {
	var opts []client.Option
	if c.sigv4 {
		opt, err := client.SigV4FromDefaultChain(ctx, c.region)
		if err != nil {
			return nil, fmt.Errorf("--sigv4: %w", err)
		}
		opts = append(opts, opt)
	}
	return client.New(c.endpoint, append(opts, client.WithUserAgent("lockctl/1"))...)
}

// call runs one request of a subcommand: it builds the client, bounds the
// context by timeout (0: do's own bound) and by SIGINT/SIGTERM, prints do's
// result as JSON and returns the exit code.
func (c *common) call(env Env, timeout time.Duration, do func(context.Context, *client.Client) (any, error)) int {
	ctx, stop := signalContext()
	defer stop()
	cl, err := c.client(ctx)
	if err != nil {
		return failed(env, err)
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	out, err := do(ctx, cl)
	if err != nil {
		return failed(env, err)
	}
	printJSON(env.Stdout, out)
	return ExitOK
}

// usageError is a problem with the command line.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// parse parses args, which hold one RESOURCE with flags before or after it.
// It returns the resource and what follows the flags after it (after a
// "--", if any).
func parse(fs *flag.FlagSet, args []string) (string, []string, error) {
	if err := fs.Parse(args); err != nil {
		return "", nil, err
	}
	if fs.NArg() == 0 {
		return "", nil, &usageError{"missing RESOURCE"}
	}
	resource := fs.Arg(0)
	if err := fs.Parse(fs.Args()[1:]); err != nil {
		return "", nil, err
	}
	return resource, fs.Args(), nil
}

// parseOnly is parse for commands that take nothing after the flags.
func parseOnly(fs *flag.FlagSet, args []string) (string, error) {
	resource, rest, err := parse(fs, args)
	if err == nil && len(rest) > 0 {
		err = &usageError{fmt.Sprintf("unexpected arguments: %q", rest)}
	}
	return resource, err
}

// parseFailed reports a parse error and returns the exit code for it.
func parseFailed(env Env, err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	var u *usageError
	if errors.As(err, &u) {
		fmt.Fprintf(env.Stderr, "lockctl: %v\nRun 'lockctl help' for usage.\n", err)
	}
	return ExitUsage
}

func checkTTL(ttl time.Duration) error {
	if ttl < time.Second || ttl%time.Second != 0 {
		return &usageError{fmt.Sprintf("--ttl %s: must be whole seconds, at least 1s", ttl)}
	}
	return nil
}

// failed reports err and returns its exit code.
func failed(env Env, err error) int {
	fmt.Fprintln(env.Stderr, "lockctl:", err)
	return exitCode(err)
}

func exitCode(err error) int {
	switch {
	case errors.Is(err, client.ErrHeld):
		return ExitHeld
	case errors.Is(err, client.ErrNotFound):
		return ExitNotFound
	case errors.Is(err, client.ErrForbidden), errors.Is(err, client.ErrStaleToken):
		return ExitConflict
	case errors.Is(err, client.ErrInvalid):
		return ExitUsage
	}
	return ExitError
}

func printJSON(w io.Writer, v any) {
	_ = json.NewEncoder(w).Encode(v)
}

// defaultOwner is unique per process: HOST:PID:RANDOM.
func defaultOwner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// signalContext is cancelled by SIGINT or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// take acquires resource: once when wait is 0, else waiting up to wait.
func take(ctx context.Context, c *client.Client, resource, owner string, ttl, wait time.Duration) (*client.Lease, error) {
	if wait <= 0 {
		ctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		return c.TryAcquire(ctx, resource, owner, ttl)
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	return c.Acquire(ctx, resource, owner, ttl)
}

func acquireCmd(args []string, env Env) int {
	fs, com := newFlagSet("acquire", env)
	ttl := fs.Duration("ttl", 30*time.Second, "lease length, whole seconds")
	wait := fs.Duration("wait", 0, "how long to wait for the lock; 0 tries once")
	owner := fs.String("owner", "", "owner (default HOST:PID:RANDOM)")
	resource, err := parseOnly(fs, args)
	if err == nil {
		err = checkTTL(*ttl)
	}
	if err != nil {
		return parseFailed(env, err)
	}
	if *owner == "" {
		*owner = defaultOwner()
	}
	return com.call(env, 0, func(ctx context.Context, c *client.Client) (any, error) {
		lease, err := take(ctx, c, resource, *owner, *ttl, *wait)
		if err != nil {
			return nil, err
		}
		return lease.Lock(), nil
	})
}

func statusCmd(args []string, env Env) int {
	fs, com := newFlagSet("status", env)
	resource, err := parseOnly(fs, args)
	if err != nil {
		return parseFailed(env, err)
	}
	return com.call(env, requestTimeout, func(ctx context.Context, c *client.Client) (any, error) {
		return c.Status(ctx, resource)
	})
}

func renewCmd(args []string, env Env) int {
	fs, com := newFlagSet("renew", env)
	ttl := fs.Duration("ttl", 30*time.Second, "new lease length from now, whole seconds")
	owner := fs.String("owner", "", "the lease's owner (required)")
	token := fs.Int64("token", 0, "the lease's fencing token (optional)")
	resource, err := parseOnly(fs, args)
	if err == nil {
		err = checkTTL(*ttl)
	}
	if err == nil && strings.TrimSpace(*owner) == "" {
		err = &usageError{"--owner is required"}
	}
	if err != nil {
		return parseFailed(env, err)
	}
	return com.call(env, requestTimeout, func(ctx context.Context, c *client.Client) (any, error) {
		return c.Renew(ctx, resource, *owner, *ttl, *token)
	})
}

func releaseCmd(args []string, env Env) int {
	fs, com := newFlagSet("release", env)
	owner := fs.String("owner", "", "the lease's owner (required)")
	token := fs.Int64("token", 0, "the lease's fencing token (optional)")
	resource, err := parseOnly(fs, args)
	if err == nil && strings.TrimSpace(*owner) == "" {
		err = &usageError{"--owner is required"}
	}
	if err != nil {
		return parseFailed(env, err)
	}
	return com.call(env, requestTimeout, func(ctx context.Context, c *client.Client) (any, error) {
		if err := c.Release(ctx, resource, *owner, *token); err != nil {
			return nil, err
		}
		return map[string]any{"resource": resource, "released": true}, nil
	})
}
