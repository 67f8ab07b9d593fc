package cli

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"sync"
	"syscall"

	"github.com/ft288/locks/cmd/lockctl/internal/console"
)

// uiHelp is the help of `lockctl ui`.
const uiHelp = `Serves a console on 127.0.0.1 (a free port; --addr to choose one) and prints
its URL; --open opens it in your browser. The page shows the locks (a lock
set's names marked) and the semaphores' permits whose name starts with
PREFIX, live: owner, principal, fencing token, acquired and expiry times
with a countdown, lock-delay, the waiters in queue order; a detail view per
name with its watch stream and a timeline of holders; and force release,
after a confirmation, of exactly the lease shown. A third tab lists the
read/write locks (the writer, each reader's slot, the waiters); lockctl
status --rw, watch --rw and force-release --read/--write act on one.
See docs/console.md.

The page talks only to lockctl, which calls the service as lockctl's other
commands do (--endpoint, --sigv4): the browser holds no credentials. The
URL carries a token that works once: the page swaps it for a cookie.
--open hands the browser a file that leads to the URL (readable by you
alone, removed once the page has opened), not the URL itself: a command
line is readable by every user of the host. Stop with Ctrl-C.

Listing and force release are admin calls: without them the page explains
the refusal and still shows a name you type in.`

// uiCmd is `lockctl ui`.
func uiCmd(args []string, env Env) int {
	fs := newFlagSet(lookup("ui"), env)
	addr := fs.String("addr", console.DefaultAddr, "listen on this loopback `HOST:PORT` (port 0: a free one)")
	open := fs.Bool("open", false, "open the page in the browser")
	err := fs.Parse(args)
	prefix := ""
	if err == nil && fs.NArg() > 0 {
		prefix = fs.Arg(0)
		err = fs.Parse(fs.Args()[1:])
	}
	if err == nil && fs.NArg() > 0 {
		err = &usageError{fmt.Sprintf("unexpected arguments: %q", fs.Args())}
	}
	if err != nil {
		return parseFailed(fs, env, err)
	}
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigc)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := fs.common.client(ctx)
	if err != nil {
		return failed(env, err)
	}
	srv, err := console.Listen(console.Config{Client: c, Endpoint: fs.common.endpoint, Addr: *addr, Prefix: prefix})
	if err != nil {
		return failed(env, err)
	}
	fmt.Fprintf(env.Stdout, "lockctl ui: open %s (the link works once; Ctrl-C stops)\n", srv.URL())
	if *open {
		defer removeLaunchers()
		if err := openBrowser(srv.URL()); err != nil {
			fmt.Fprintf(env.Stderr, "lockctl ui: could not open a browser (%v); open the URL above\n", err)
		}
		go func() {
			select {
			case <-srv.Exchanged():
				removeLaunchers()
			case <-ctx.Done():
			}
		}()
	}
	go func() {
		select {
		case <-sigc:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := srv.Serve(ctx); err != nil {
		return failed(env, err)
	}
	return ExitOK
}

// launchers are the removers of the files openBrowser wrote.
var launchers struct {
	sync.Mutex
	remove []func()
}

// removeLaunchers removes the files openBrowser wrote: once the token is
// exchanged, and at exit.
func removeLaunchers() {
	launchers.Lock()
	defer launchers.Unlock()
	for _, rm := range launchers.remove {
		rm()
	}
	launchers.remove = nil
}

// openBrowser opens url, which carries the one-time token, in the
// desktop's browser: through a file only the user can read that leads to
// url (console.WriteLauncher), since the command lines of the opener and
// the browser are readable by every user. removeLaunchers removes it.
func openBrowser(url string) error {
	path, remove, err := console.WriteLauncher(url)
	if err != nil {
		return err
	}
	launchers.Lock()
	launchers.remove = append(launchers.remove, remove)
	launchers.Unlock()
	var cmd *exec.Cmd
	switch runtime.GOOS {
	case "darwin":
		cmd = exec.Command("open", path)
	case "windows":
		cmd = exec.Command("rundll32", "url.dll,FileProtocolHandler", path)
	default:
		cmd = exec.Command("xdg-open", path)
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() { _ = cmd.Wait() }()
	return nil
}
