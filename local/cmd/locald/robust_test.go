package main

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestBusyPort: a second `make run` on a port in use fails at once with the
// bind error, having claimed nothing: no "serving" line, no dynalite.
func TestBusyPort(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cmd := exec.Command(bin, "-addr", ln.Addr().String())
	cmd.Env = plainEnv()
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err = cmd.Run()
	if err == nil {
		t.Fatal("locald on a busy port exited 0, want a failure")
	}
	if !strings.Contains(stderr.String(), "address already in use") {
		t.Errorf("stderr %q, want the bind error", stderr.String())
	}
	if strings.Contains(stdout.String(), "serving the lock API") || strings.Contains(stdout.String(), "dynalite") {
		t.Errorf("locald claimed to serve or started dynalite before failing to bind:\n%s", stdout.String())
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("failing to bind took %v, want at once", took)
	}
}

// TestStoreDeathStopsLocald: if the embedded dynalite dies, every lock is
// gone; locald must say so and exit non-zero, not serve 503s forever.
func TestStoreDeathStopsLocald(t *testing.T) {
	t.Parallel()
	p := startLocald(t)
	node := childPID(t, p.cmd.Process.Pid)
	if err := syscall.Kill(node, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatal("locald still running 10s after its dynalite died")
	}
	if code := p.cmd.ProcessState.ExitCode(); code == 0 {
		t.Errorf("locald exited 0 after its store died, want non-zero")
	}
	if !strings.Contains(p.Stderr(), "dynalite exited unexpectedly") {
		t.Errorf("stderr %q, want a clear message about the store", p.Stderr())
	}
}

// TestAbortedRequestsKeepStoreAlive: clients that give up mid-request (on
// locald, and on dynalite itself half-way through a body) must not take the
// store down; afterwards locald still gives the documented answers.
func TestAbortedRequestsKeepStoreAlive(t *testing.T) {
	t.Parallel()
	p := startLocald(t)

	// Straight at dynalite: headers, half a body once dynalite is reading
	// it (its "100 Continue" comes when its request handler runs), then a
	// reset. Without the guard dynalite throws from the request's 'error'
	// event and dies.
	for i := 0; i < 5; i++ {
		c, err := net.Dial("tcp", p.Dynalite)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write([]byte("POST / HTTP/1.1\r\nHost: x\r\nX-Amz-Target: DynamoDB_20120810.GetItem\r\nContent-Type: application/x-amz-json-1.0\r\nExpect: 100-continue\r\nContent-Length: 100\r\n\r\n"))
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || !strings.Contains(line, "100 Continue") {
			t.Fatalf("dynalite answered %q, %v to Expect: 100-continue, want 100 Continue (did an earlier aborted request kill it?)", line, err)
		}
		_, _ = c.Write([]byte(`{"TableName":`))
		c.(*net.TCPConn).SetLinger(0)
		c.Close()
	}
	// Through locald: clients that hang up while the handler works. Each
	// request that reached locald whole (one write on its connection)
	// reaches a handler, which logs it when done.
	var written atomic.Int32
	tr := http.DefaultTransport.(*http.Transport).Clone()
	dial := tr.DialContext
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countingConn{Conn: c, written: &written}, nil
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	var wg sync.WaitGroup
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%8)*time.Millisecond)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "POST", p.URL+"/locks/abort-"+strconv.Itoa(i%4), strings.NewReader(`{"owner":"w1","ttl_seconds":30}`))
			req.Header.Set("Content-Type", "application/json")
			if resp, err := client.Do(req); err == nil {
				resp.Body.Close()
			}
		}(i)
	}
	wg.Wait()
	// Every abandoned handler has finished: as many request lines as
	// requests written.
	want := int(written.Load())
	p.waitStdout(t, 10*time.Second, func(out string) bool {
		return strings.Count(out, `"msg":"request"`) >= want
	})

	select {
	case <-p.done:
		t.Fatalf("locald exited: %s\nstderr: %s", p.cmd.ProcessState, p.Stderr())
	default:
	}
	resp, err := http.Post(p.URL+"/locks/after-aborts", "application/json", strings.NewReader(`{"owner":"w1","ttl_seconds":30}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("acquire after aborted requests: got %d, want 200 (store alive)", resp.StatusCode)
	}
	req, _ := http.NewRequest("DELETE", p.URL+"/locks/after-aborts", strings.NewReader(`{"owner":"w2"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Errorf("release by another owner: got %d, want 403", resp.StatusCode)
	}
}

// childPID returns the one child process of pid (locald's dynalite).
func childPID(t *testing.T, pid int) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces, so split after ')'.
		s := string(stat)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			return child
		}
	}
	t.Fatalf("no child process of %d found", pid)
	return 0
}

// countingConn counts the writes that went out whole: a request of a few
// hundred bytes is one write.
type countingConn struct {
	net.Conn
	written *atomic.Int32
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err == nil && n == len(p) {
		c.written.Add(1)
	}
	return n, err
}
