package rie

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// Emulator is one function's bootstrap running under its own Lambda
// Runtime Interface Emulator, on free loopback ports. Like one Lambda
// execution environment it serves one invocation at a time.
type Emulator struct {
	url  string // the emulator's invocation endpoint
	cmd  *exec.Cmd
	done chan struct{} // closed when the emulator exits
	log  syncBuffer
	mu   sync.Mutex // serializes invocations
}

// FunctionEnv is what a Lambda function named name sees: the service's
// settings for table at endpoint, placeholder credentials, and the Lambda
// variables — and nothing of the host's AWS settings (profiles, real
// credentials). extra is appended.
func FunctionEnv(name, table, endpoint string, timeout time.Duration, extra ...string) []string {
	return append([]string{
		"TABLE_NAME=" + table,
		"DYNAMODB_ENDPOINT=" + endpoint,
		"AWS_REGION=us-east-1",
		"AWS_ACCESS_KEY_ID=fake",
		"AWS_SECRET_ACCESS_KEY=fake",
		"AWS_EC2_METADATA_DISABLED=true",
		"AWS_LAMBDA_FUNCTION_NAME=" + name,
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE=128",
		"AWS_LAMBDA_FUNCTION_TIMEOUT=" + strconv.Itoa(int(timeout.Seconds())),
		"LOG_LEVEL=info", // read by the emulator and the handler alike
	}, extra...)
}

// Start runs bootstrap under the emulator binary rieBin with env (PATH and
// HOME are added) and waits until the emulator listens. It retries when a
// port it picked was taken in between.
func Start(ctx context.Context, rieBin, bootstrap string, env []string) (*Emulator, error) {
	var errs []error
	for attempt := 0; attempt < 3; attempt++ {
		e, err := tryStart(ctx, rieBin, bootstrap, env)
		if err == nil {
			return e, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("start %s under the emulator: %w", bootstrap, errors.Join(errs...))
}

func tryStart(ctx context.Context, rieBin, bootstrap string, env []string) (*Emulator, error) {
	emuPort, apiPort, err := freePorts()
	if err != nil {
		return nil, err
	}
	e := &Emulator{
		url:  "http://127.0.0.1:" + emuPort + "/2015-03-31/functions/function/invocations",
		done: make(chan struct{}),
	}
	e.cmd = exec.Command(rieBin,
		"--runtime-interface-emulator-address", "127.0.0.1:"+emuPort,
		"--runtime-api-address", "127.0.0.1:"+apiPort,
		bootstrap)
	e.cmd.Dir = filepath.Dir(bootstrap)
	e.cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + e.cmd.Dir}, env...)
	e.cmd.Stdout, e.cmd.Stderr = &e.log, &e.log
	// Own process group, so Stop reaches the bootstrap too; and the
	// emulator is told to stop (and stop its bootstrap) should the process
	// that started it die first.
	e.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := e.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		_ = e.cmd.Wait()
		close(e.done)
	}()
	if err := e.waitListening(ctx, "127.0.0.1:"+emuPort); err != nil {
		e.Stop()
		return nil, fmt.Errorf("%w\n%s", err, e.Log())
	}
	return e, nil
}

func (e *Emulator) waitListening(ctx context.Context, addr string) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-e.done:
			return errors.New("emulator exited before listening")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("emulator did not listen within 15s")
		}
	}
}

// Log returns what the emulator and the bootstrap have written so far.
func (e *Emulator) Log() string { return e.log.String() }

// Stop ends the emulator and its bootstrap: SIGTERM to the process group,
// SIGKILL after a grace period.
func (e *Emulator) Stop() {
	pgid := e.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-e.done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-e.done
	}
	// The bootstrap shares the group; make sure nothing of it is left.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// Invoke sends one event to the function and decodes its answer; raw is the
// emulator's body. A function error or an answer that is not an API Gateway
// v2 response is an error.
func (e *Emulator) Invoke(ctx context.Context, ev []byte) (resp events.APIGatewayV2HTTPResponse, raw string, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(ev))
	if err != nil {
		return resp, "", err
	}
	hr, err := http.DefaultClient.Do(req)
	if err != nil {
		return resp, "", err
	}
	defer hr.Body.Close()
	var body bytes.Buffer
	if _, err := body.ReadFrom(hr.Body); err != nil {
		return resp, "", err
	}
	var fnErr struct {
		ErrorType string `json:"errorType"`
	}
	switch {
	case hr.StatusCode != http.StatusOK:
		return resp, body.String(), fmt.Errorf("emulator answered %s: %s", hr.Status, body.String())
	case json.Unmarshal(body.Bytes(), &fnErr) == nil && fnErr.ErrorType != "":
		return resp, body.String(), fmt.Errorf("function failed: %s", body.String())
	}
	if err := json.Unmarshal(body.Bytes(), &resp); err != nil || resp.StatusCode == 0 {
		return resp, body.String(), fmt.Errorf("not an API Gateway v2 response: %s", body.String())
	}
	return resp, body.String(), nil
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
