// Package local runs the lock service on a laptop: an in-memory dynalite
// (a DynamoDB-compatible server from npm) and an HTTP server that turns each
// request into the API Gateway HTTP API event the Lambda functions receive
// and calls the very same handlers.
package local

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// dynaliteJS starts dynalite in memory on a free loopback port, prints the
// port, and exits when its stdin closes, so it cannot outlive the Go process
// that started it (even one killed with SIGKILL).
//
// dynalite throws from a request's 'error' event (a client that aborts
// mid-request), which would kill the process and every lock with it; the
// guard answers such a request by dropping it instead.
//
// dynalite parses every ConditionExpression anew with a backtracking
// parser: an acquire's condition takes it ~16 ms of its one thread (a bare
// write ~0.5 ms), which held the local runner to ~50 acquires a second.
// parseCache remembers each parse by the expression, its attribute names
// and its values' types, with the values themselves left as marks that
// each request's values replace in a copy (and the bookkeeping of unused
// names and values replayed): the same tree the parser would build. An
// expression whose checks read a value's content (attribute_type, BETWEEN)
// is parsed every time; one that fails to parse is never remembered.
const dynaliteJS = parseCacheJS + `
const dynalite = require('dynalite');
const server = dynalite({createTableMs: 0, deleteTableMs: 0, updateTableMs: 0});
server.prependListener('request', (req, res) => {
  const on = req.on;
  req.on = function (event, fn) {
    if (event !== 'error') return on.call(this, event, fn);
    return on.call(this, 'error', (err) => {
      console.error('dynalite: request aborted by its client: ' + err.message);
      res.destroy();
    });
  };
});
server.listen(0, '127.0.0.1', () => { console.log('PORT ' + server.address().port); });
process.stdin.on('end', () => process.exit(0));
process.stdin.on('error', () => process.exit(0));
process.stdin.resume();
for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => process.exit(0));
`

// parseCacheJS wraps dynalite's condition parser with a cache (see
// dynaliteJS); TestParseCache holds it to the parser's own answers.
const parseCacheJS = `
{
  const parser = require('dynalite/db/conditionParser');
  const parse = parser.parse;
  const cache = new Map();
  const mark = Symbol('value');
  const copy = (node, vals) => {
    if (node === null || typeof node !== 'object') return node;
    if (node[mark] !== undefined) return vals[node[mark]];
    const out = Array.isArray(node) ? [] : Object.create(Object.getPrototypeOf(node));
    for (const k of Object.keys(node)) out[k] = copy(node[k], vals);
    return out;
  };
  parser.parse = function (str, options) {
    const ctx = options && options.context;
    if (!ctx || /attribute_type|between/i.test(str)) return parse.call(this, str, options);
    const vals = ctx.attrVals || {};
    const key = JSON.stringify([str, ctx.attrNames || null, !!ctx.isKeyCondition,
      Object.keys(vals).sort().map((k) => [k, Object.keys(vals[k]).sort()])]);
    let hit = cache.get(key);
    if (!hit) {
      const marked = {};
      for (const k of Object.keys(vals)) {
        marked[k] = Object.assign({}, vals[k]);
        Object.defineProperty(marked[k], mark, {value: k});
      }
      const names = Object.keys(ctx.unusedAttrNames || {}), values = Object.keys(ctx.unusedAttrVals || {});
      const tree = parse.call(this, str, Object.assign({}, options, {context: Object.assign({}, ctx, {attrVals: marked})}));
      hit = {tree, names: names.filter((k) => !(k in ctx.unusedAttrNames)), values: values.filter((k) => !(k in ctx.unusedAttrVals))};
      if (cache.size < 10000) cache.set(key, hit);
      return copy(hit.tree, vals);
    }
    for (const k of hit.names) delete ctx.unusedAttrNames[k];
    for (const k of hit.values) delete ctx.unusedAttrVals[k];
    return copy(hit.tree, vals);
  };
}
`

// Dynalite is a running in-memory dynalite server.
type Dynalite struct {
	// Endpoint is the server's base URL, e.g. http://127.0.0.1:41234.
	Endpoint string
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	exited   chan struct{}
	err      error
}

// StartDynalite starts dynalite from the repository's node_modules (run
// `npm ci` first; `make run` and `make test` do) and waits until it listens.
func StartDynalite(ctx context.Context) (*Dynalite, error) {
	root, err := FindRepoRoot()
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(root, "node_modules", "dynalite", "package.json")); err != nil {
		return nil, fmt.Errorf("dynalite is not installed in %s/node_modules: run `npm ci` (make does)", root)
	}
	cmd := exec.Command("node", "-e", dynaliteJS)
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	// Its own process group: a Ctrl-C in the terminal reaches the Go
	// process, which then stops dynalite itself (and closing stdin stops it
	// if the Go process dies first).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start dynalite (is node installed?): %w", err)
	}
	d := &Dynalite{cmd: cmd, stdin: stdin, exited: make(chan struct{})}
	portc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if p, ok := strings.CutPrefix(sc.Text(), "PORT "); ok {
				portc <- p
			}
		}
		d.err = cmd.Wait()
		close(d.exited)
	}()
	timeout := time.NewTimer(20 * time.Second)
	defer timeout.Stop()
	select {
	case p := <-portc:
		d.Endpoint = "http://127.0.0.1:" + p
		return d, nil
	case <-d.exited:
		return nil, fmt.Errorf("dynalite exited before listening: %v", d.err)
	case <-timeout.C:
		d.Close()
		return nil, errors.New("dynalite did not start within 20s")
	case <-ctx.Done():
		d.Close()
		return nil, ctx.Err()
	}
}

// Exited is closed when the dynalite process has exited, whether Close
// stopped it or it died; Err then says how.
func (d *Dynalite) Exited() <-chan struct{} { return d.exited }

// Err returns how the process ended, once Exited is closed.
func (d *Dynalite) Err() error {
	<-d.exited
	return d.err
}

// Close stops dynalite and waits for it to exit.
func (d *Dynalite) Close() error {
	d.stdin.Close()
	select {
	case <-d.exited:
	case <-time.After(3 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.exited
	}
	return nil
}

// FindRepoRoot returns the nearest folder at or above the working directory
// that holds go.mod and package.json.
func FindRepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if fileExists(filepath.Join(dir, "go.mod")) && fileExists(filepath.Join(dir, "package.json")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("repository root (go.mod + package.json) not found above the working directory")
		}
		dir = parent
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
