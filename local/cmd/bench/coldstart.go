package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ft288/locks/api"
)

// rieCmd is the Lambda Runtime Interface Emulator's main package, pinned
// as a tool in go.mod (as local/rie builds it).
const rieCmd = "github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie"

// helloPkg is the yardstick function.
const helloPkg = "./local/cmd/bench/hello"

// lambdaFlags are the Makefile's LAMBDA_FLAGS: how `make build` builds a
// function for Lambda.
var lambdaFlags = []string{"-tags", "lambda.norpc", "-trimpath", "-ldflags=-s -w"}

// builds holds the binaries the cold-start and size figures use.
type builds struct {
	rie   string            // the emulator
	host  map[string]string // name → bootstrap for this machine
	sizes map[string]int64  // name → bytes of the linux/arm64 bootstrap
}

// functionNames are the binaries measured: every function once (the admin
// function serves two routes), then the yardstick.
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
	emuPort, apiPort, err := freePorts()
	if err != nil {
		return 0, 0, err
	}
	timeout := "5"
	for _, r := range api.Routes {
		if r.Name == name {
			timeout = strconv.Itoa(int(r.Timeout.Seconds()))
		}
	}
	var log syncBuffer
	cmd := exec.Command(b.rie, "--runtime-interface-emulator-address", "127.0.0.1:"+emuPort,
		"--runtime-api-address", "127.0.0.1:"+apiPort, b.host[name])
	cmd.Dir = filepath.Dir(b.host[name])
	// What a Lambda function sees, as in local/rie: no AWS settings of the
	// host. DynamoDB returns old items in AWS; dynalite does not, but the
	// answers here need none.
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + cmd.Dir,
		"TABLE_NAME=" + table, "DYNAMODB_ENDPOINT=" + endpoint, "DYNAMODB_RETURNS_OLD_ITEM=true",
		"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=fake", "AWS_SECRET_ACCESS_KEY=fake", "AWS_EC2_METADATA_DISABLED=true",
		"AWS_LAMBDA_FUNCTION_NAME=" + name, "AWS_LAMBDA_FUNCTION_MEMORY_SIZE=128", "AWS_LAMBDA_FUNCTION_TIMEOUT=" + timeout,
		"LOG_LEVEL=info",
	}
	cmd.Stdout, cmd.Stderr = &log, &log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	defer func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	}()
	if err := waitListening(ctx, "127.0.0.1:"+emuPort); err != nil {
		return 0, 0, fmt.Errorf("%w\n%s", err, log.String())
	}
	url := "http://127.0.0.1:" + emuPort + "/2015-03-31/functions/function/invocations"
	for i, d := range []*time.Duration{&first, &warm} {
		ev := coldEvent(name, fmt.Sprintf("cold-%s-%d-%d-%d", name, time.Now().UnixNano(), trial, i))
		start := time.Now()
		if err := invoke(ctx, url, ev); err != nil {
			return 0, 0, fmt.Errorf("%w\n%s", err, log.String())
		}
		*d = time.Since(start)
	}
	return first, warm, nil
}

// coldEvent is the API Gateway HTTP API event of the route name on
// resource: an acquire that succeeds, and a status, release and renew of a
// lock that does not exist (404), each answered after one DynamoDB request.
func coldEvent(name, resource string) []byte {
	route := api.Route{Method: "POST", Path: "/hello"}
	body := ""
	for _, r := range api.Routes {
		if r.Name == name {
			route = r
		}
	}
	switch name {
	case "acquire", "renew":
		body = `{"owner":"cold","ttl_seconds":30}`
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
		},
		"isBase64Encoded": false,
	}
	if body != "" {
		ev["body"] = body
	}
	b, _ := json.Marshal(ev)
	return b
}

// invoke sends ev to the emulator and checks the function answered.
func invoke(ctx context.Context, url string, ev []byte) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(ev))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var out struct {
		StatusCode int    `json:"statusCode"`
		ErrorType  string `json:"errorType"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 || out.ErrorType != "" || out.StatusCode >= 500 || out.StatusCode == 0 {
		return fmt.Errorf("invocation failed: HTTP %d, %+v, %v", resp.StatusCode, out, err)
	}
	return nil
}

func waitListening(ctx context.Context, addr string) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return errors.New("emulator did not listen within 15s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// freePorts returns two distinct free loopback ports.
func freePorts() (string, string, error) {
	var ports []string
	for range 2 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", "", err
		}
		defer l.Close()
		ports = append(ports, strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	}
	return ports[0], ports[1], nil
}

// syncBuffer is a bytes.Buffer safe for the emulator's two output pipes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
