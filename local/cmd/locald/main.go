// Command locald serves the lock API on a laptop: `make run`.
//
// Without DYNAMODB_ENDPOINT it starts an in-memory dynalite on a free port;
// with it, it uses that DynamoDB-compatible endpoint (DynamoDB Local, or AWS
// itself with real credentials). Either way it creates TABLE_NAME (default
// "locks") when missing and serves every route of api.Routes through the
// same handlers the Lambda functions run. Ctrl-C or SIGTERM stops it and
// dynalite.
//
// It models the default stack's capacity (local.Capacity): each route's
// throttle, answered 429 {"message":"Too Many Requests"}, and Lambda's
// account pool of concurrent executions, answered 500 {"message":"Internal
// Server Error"}. -reserve models the stack deployed with -c reserve=true
// (reserved concurrency for acquire, wait, watch, renew and release);
// -capacity off models no limit, for benchmarks. Requests the model refuses
// are logged as one line a second, counted by route.
//
// With -counts FILE it writes what the runner counted (requests by route,
// try-acquires that carried wait_seconds, refusals: local.Counts) to FILE
// as JSON on SIGUSR1 and when it stops: tests of the clients written in
// other languages read it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/ft288/locks/api"
	"github.com/ft288/locks/local"
	"github.com/ft288/locks/locklogic"
)

func main() {
	addr := flag.String("addr", envOr("ADDR", "127.0.0.1:8080"), "address to listen on (env ADDR)")
	counts := flag.String("counts", "", "write the request counts as JSON to `FILE` on SIGUSR1 and on exit")
	var cf capacityFlags
	cf.register(flag.CommandLine)
	flag.Parse()
	capacity, err := cf.capacity()
	if err != nil {
		fmt.Fprintln(os.Stderr, "locald:", err)
		os.Exit(2)
	}
	if os.Getenv("TABLE_NAME") == "" {
		os.Setenv("TABLE_NAME", "locks")
	}
	if err := run(*addr, capacity, *counts); err != nil {
		fmt.Fprintln(os.Stderr, "locald:", err)
		os.Exit(1)
	}
}

// listenError explains a failed bind of addr: a second `make run` on a busy
// port must say how to choose another (ADDR=, -addr), not only "address
// already in use".
func listenError(addr string, err error) error {
	other := "127.0.0.1:8081"
	if host, port, splitErr := net.SplitHostPort(addr); splitErr == nil {
		if n, convErr := strconv.Atoi(port); convErr == nil && n > 0 && n < 65535 {
			other = net.JoinHostPort(host, strconv.Itoa(n+1))
		}
	}
	how := fmt.Sprintf("make run ADDR=%s (locald -addr %s, env ADDR), and point the clients at it: LOCKS_ENDPOINT=http://%s", other, other, other)
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return fmt.Errorf("%w\n%s is in use, by another locald (an earlier make run?) or another server: stop that one, or serve on another address:\n  %s", err, addr, how)
	case errors.Is(err, syscall.EACCES):
		return fmt.Errorf("%w\n%s needs privileges (a port below 1024?): serve on another address:\n  %s", err, addr, how)
	}
	return fmt.Errorf("%w (the address is -addr, env ADDR: %s)", err, how)
}

func run(addr string, capacity local.Capacity, countsFile string) error {
	cfg, err := api.ConfigFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	log := api.NewLogger(cfg.LogLevel)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// Bind first: a busy port fails at once, before dynalite starts and
	// before anything claims to serve. With port 0 the "serving" line
	// carries the port the kernel chose, so tests and scripts can start
	// locald on a free port and read its URL from the log.
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return listenError(addr, err)
	}
	defer ln.Close()

	// storeDied is closed if the embedded dynalite exits on its own: every
	// lock is gone with it, so locald must not go on serving 503s.
	var storeDied <-chan struct{}
	if cfg.Endpoint == "" {
		d, err := local.StartDynalite(ctx)
		if err != nil {
			return err
		}
		defer d.Close()
		cfg.Endpoint, storeDied = d.Endpoint, d.Exited()
		log.Info("started in-memory dynalite", "endpoint", d.Endpoint)
	}
	db, err := api.NewDynamoDB(ctx, cfg.Endpoint)
	if err != nil {
		return err
	}
	setupCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	created, err := local.EnsureTable(setupCtx, db, cfg.Table)
	if err != nil {
		return err
	}
	// Ask the store instead of guessing from the endpoint: the flag must
	// match the store in use, or refused renewals and releases would all
	// be explained as 404.
	oldItem, err := local.ReturnsOldItem(setupCtx, db, cfg.Table)
	if err != nil {
		return err
	}
	if cfg.OldItemSet && cfg.OldItemOnFailure != oldItem {
		return fmt.Errorf("DYNAMODB_RETURNS_OLD_ITEM=%t, but the store at %s answers as if it were %t: unset it", cfg.OldItemOnFailure, cfg.Endpoint, oldItem)
	}
	cfg.OldItemOnFailure = oldItem
	cancel()
	log.Info("table ready", "table", cfg.Table, "created", created, "endpoint", cfg.Endpoint, "returns_old_item", oldItem)

	svc := locklogic.New(db, cfg.ServiceConfig())
	h := api.NewHandler(svc, log, nil)
	h.SetMetricsNamespace(cfg.MetricsNamespace)
	runner := local.NewRunner(h, log)
	if err := runner.SetCapacity(capacity); err != nil {
		return err
	}
	log.Info("capacity model", "capacity", capacity)
	srv := &http.Server{
		Handler:           runner,
		ReadHeaderTimeout: 10 * time.Second,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	dump := make(chan os.Signal, 1)
	if countsFile != "" {
		notifyDump(dump)
		defer signal.Stop(dump)
	}
	log.Info("serving the lock API", "url", "http://"+ln.Addr().String())
	defer dumpCounts(log, countsFile, runner) // on every way out, after the last request
	for waiting := true; waiting; {
		select {
		case err := <-errc:
			return err
		case <-storeDied:
			srv.Close()
			return errors.New("the in-memory dynalite exited unexpectedly; every lock it held is gone (see its output above)")
		case <-dump:
			dumpCounts(log, countsFile, runner)
		case <-ctx.Done():
			waiting = false
		}
	}
	log.Info("shutting down")
	shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
