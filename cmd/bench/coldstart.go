package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ft288/locks/api"
	"github.com/ft288/locks/internal/verify/rie"
)

// rieCmd is the Lambda Runtime Interface Emulator's main package, pinned
// as a tool in go.mod (as internal/verify/rie builds it).
const rieCmd = "github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie"

// helloPkg is the yardstick function.
const helloPkg = "./cmd/bench/hello"

// lambdaFlags are the Makefile's LAMBDA_FLAGS: how `make build` builds a
// function for Lambda.
var lambdaFlags = []string{"-tags", "lambda.norpc", "-trimpath", "-ldflags=-s -w"}

// builds holds the binaries the cold-start and size figures use.
type builds struct {
	rie   string            // the emulator
	host  map[string]string // name → bootstrap for this machine
	sizes map[string]int64  // name → bytes of the linux/arm64 bootstrap
}

// functionNames are the binaries measured: every function once (each
// serves a lock row and a semaphore row; admin two of each), then the
// yardstick.
func functionNames() []string {
	var names []string
	for _, r := range api.Routes {
		if !slices.Contains(names, r.Name) {
			names = append(names, r.Name)
		}
	}
	return append(names, "hello")
}

// buildAll builds the emulator, every function and hello for this machine
// (to run under the emulator) and for linux/arm64 (to weigh), with the
// Makefile's Lambda flags.
func buildAll(ctx context.Context, root, dir string) (*builds, error) {
	goBuild := func(env []string, args ...string) error {
		cmd := exec.CommandContext(ctx, "go", append([]string{"build"}, args...)...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	b := &builds{rie: filepath.Join(dir, "aws-lambda-rie"), host: map[string]string{}, sizes: map[string]int64{}}
	if err := goBuild(nil, "-trimpath", "-o", b.rie, rieCmd); err != nil {
		return nil, err
	}
	var pkgs []string
	for _, r := range api.Routes {
		pkgs = append(pkgs, "./functions/"+r.Name)
	}
	pkgs = append(pkgs, helloPkg)
	for _, target := range []struct {
		dir string
		env []string
	}{
		{"host", []string{"CGO_ENABLED=0"}},
		{"arm64", []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm64"}},
	} {
		out := filepath.Join(dir, target.dir) + string(filepath.Separator)
		if err := goBuild(target.env, append(append(slicesClone(lambdaFlags), "-o", out), pkgs...)...); err != nil {
			return nil, err
		}
	}
	for _, name := range functionNames() {
		b.host[name] = filepath.Join(dir, "host", name)
		fi, err := os.Stat(filepath.Join(dir, "arm64", name))
		if err != nil {
			return nil, err
		}
		b.sizes[name] = fi.Size()
	}
	return b, nil
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }

// coldResult is one function's cold starts.
type coldResult struct {
	first []time.Duration // first invocation, wall time from the request to the answer
	warm  []time.Duration // the second, on the same process
}

// startUp is the median cold start minus the median warm invocation: the
// start of the process and of the function alone.
func (c *coldResult) startUp() time.Duration { return median(c.first) - median(c.warm) }

// coldStarts starts every binary under a fresh emulator trials times (in
// turns, in a rotating order, so that a noisy moment hits all alike) and times its first
// invocation: the process start, Go's and the function's initialisation
// (configuration, SDK client), the Runtime API handshake and the first
// event, which for the lock functions makes one DynamoDB request to the
// bench's dynalite; then a second one, warm. (The emulator's own "Init
// Duration" is not used: it ends before the function has started.)
func coldStarts(ctx context.Context, b *builds, endpoint string, trials int) (map[string]*coldResult, error) {
	out := map[string]*coldResult{}
	for _, name := range functionNames() {
		out[name] = &coldResult{}
	}
	names := functionNames()
	for trial := range trials {
		// Each trial starts with another binary: no one always comes first.
		names = append(names[1:], names[0])
		for _, name := range names {
			first, warm, err := coldStart(ctx, b, name, endpoint, trial)
			if err != nil {
				return nil, fmt.Errorf("cold start of %s: %w", name, err)
			}
			out[name].first = append(out[name].first, first)
			out[name].warm = append(out[name].warm, warm)
		}
	}
	return out, nil
}

func coldStart(ctx context.Context, b *builds, name, endpoint string, trial int) (first, warm time.Duration, err error) {
	timeout := 5 * time.Second
	for _, r := range api.Routes {
		if r.Name == name {
			timeout = r.Timeout
		}
	}
	// DynamoDB returns old items in AWS; dynalite does not, but the answers
	// here need none. The bench's caller is an administrator, so the admin
	// function answers past its allowlist, as for an operator.
	emu, err := rie.Start(ctx, b.rie, b.host[name], rie.FunctionEnv(name, table, endpoint, timeout, "DYNAMODB_RETURNS_OLD_ITEM=true",
		api.AdminPrincipalsEnv+"="+benchCaller))
	if err != nil {
		return 0, 0, err
	}
	defer emu.Stop()
	for i, d := range []*time.Duration{&first, &warm} {
		ev := coldEvent(name, fmt.Sprintf("cold-%s-%d-%d-%d", name, time.Now().UnixNano(), trial, i))
		start := time.Now()
		resp, _, err := emu.Invoke(ctx, ev)
		if err == nil && resp.StatusCode >= 500 {
			err = fmt.Errorf("invocation answered %d", resp.StatusCode)
		}
		if err != nil {
			return 0, 0, fmt.Errorf("%w\n%s", err, emu.Log())
		}
		*d = time.Since(start)
	}
	return first, warm, nil
}

// benchCaller is the IAM identity of the bench's events.
const benchCaller = "arn:aws:iam::123456789012:user/bench"

// coldEvent is the API Gateway HTTP API event of the route name on
// resource: an acquire (and a waiting one, of a free lock) that succeeds,
// and a status, release and renew of a lock that does not exist (404), each
// answered after one DynamoDB request.
func coldEvent(name, resource string) []byte {
	route := api.Route{Method: "POST", Path: "/hello"}
	body := ""
	for _, r := range api.Routes {
		if r.Name == name && !strings.HasPrefix(strings.TrimPrefix(r.Path, "/admin"), "/semaphores") {
			route = r // the lock rows (a function's semaphore row is not what this event is)
		}
	}
	switch name {
	case "acquire", "renew":
		body = `{"owner":"cold","ttl_seconds":30}`
	case "wait":
		body = `{"owner":"cold","ttl_seconds":30,"wait_seconds":1}`
	case "release":
		body = `{"owner":"cold"}`
	}
	path := strings.Replace(route.Path, "{resource}", url.PathEscape(resource), 1)
	ev := map[string]any{
		"version": "2.0", "routeKey": route.Key(), "rawPath": path, "rawQueryString": "",
		"headers":        map[string]any{"content-type": "application/json", "host": "abc123.execute-api.us-east-1.amazonaws.com"},
		"pathParameters": map[string]any{"resource": resource},
		"requestContext": map[string]any{
			"accountId": "123456789012", "apiId": "abc123", "domainName": "abc123.execute-api.us-east-1.amazonaws.com",
			"domainPrefix": "abc123", "requestId": "bench-" + resource, "routeKey": route.Key(), "stage": "$default",
			"time": time.Now().UTC().Format("02/Jan/2006:15:04:05 -0700"), "timeEpoch": time.Now().UnixMilli(),
			"http": map[string]any{"method": route.Method, "path": path, "protocol": "HTTP/1.1", "sourceIp": "192.0.2.10", "userAgent": "bench"},
			"authorizer": map[string]any{"iam": map[string]any{
				"accountId": "123456789012", "userArn": benchCaller, "userId": "AIDAEXAMPLEBENCH00001", "callerId": "AIDAEXAMPLEBENCH00001",
			}},
		},
		"isBase64Encoded": false,
	}
	if body != "" {
		ev["body"] = body
	}
	b, _ := json.Marshal(ev)
	return b
}
