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
	"strconv"
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
// It first loads dynalite's condition parser memoized (parserMemoJS) and
// prints "MEMO n", n the parser rules memoized (0: the parser kept as it
// is, with the reason on stderr).
const dynaliteJS = parserMemoJS + `
const memoRules = memoizeConditionParser();
const dynalite = require('dynalite');
console.log('MEMO ' + (memoRules > 0 && parserIsUsed() ? memoRules : 0));
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

// parserMemoJS defines memoizeConditionParser, which loads dynalite's
// condition parser with each rule's result memoized per input position (a
// packrat parser), and parserIsUsed, which says dynalite's request
// validation took that parser. It must run before dynalite is required.
//
// The generated PEG parser (pegjs, built without its cache option)
// backtracks: every alternative of "A OR B" / "A AND B" parses its first
// operand again, and "((" tries a redundant-parentheses rule first, so
// the work grows exponentially with the nesting of parentheses. The lock
// acquire's condition (435 characters, 5 deep) took 514,232 rule calls,
// about 20 ms of dynalite's one thread; a semaphore acquire's, 3.1 million
// (about 150 ms). Memoized, each (rule, position, silent or not) is parsed
// once: 1,650 and 1,888 calls. The grammar, its actions and its messages
// are dynalite's own (the packrat form pegjs's --cache generates, keyed by
// the silent mode too so that error messages stay the same), so it accepts
// and rejects what dynalite did: TestParserMemo compares the two on the
// service's own conditions and on expressions dynalite rejects.
const parserMemoJS = `
const parserFs = require('fs'), parserPath = require('path'), ParserModule = require('module');
const parserDir = parserPath.join(parserPath.dirname(require.resolve('dynalite')), 'db');
const parserFile = parserPath.join(parserDir, 'conditionParser.js');
let parserMemo = null;

// memoizedParserSource rewrites the generated parser src: each rule
// function answers from a per-parse cache, keyed by position, rule and
// peg$silentFails (so error messages list what they listed before). It
// returns the source and the number of rules it wrapped (0: not the
// expected shape).
function memoizedParserSource(src) {
  let rules = 0;
  const head = /^function peg\$parse\(input, options\) \{\n/m;
  if (!head.test(src)) return {src, rules};
  src = src.replace(head, (h) => h + '  var peg$memo = new Map();\n');
  src = src.replace(/^  function (peg\$parse\w*)\(\) \{$/gm, (line, name) => {
    const i = rules++;
    return '  function ' + name + '() {\n' +
      '    var k = (peg$currPos * 128 + ' + i + ') * 2 + (peg$silentFails ? 1 : 0), c = peg$memo.get(k);\n' +
      '    if (c) { peg$currPos = c.p; return c.r; }\n' +
      '    var r = ' + name + '$raw();\n' +
      '    peg$memo.set(k, {p: peg$currPos, r: r});\n' +
      '    return r;\n' +
      '  }\n' +
      '  function ' + name + '$raw() {';
  });
  return {src, rules: rules < 128 ? rules : 0};
}

// loadParser compiles src as the module file, outside require's cache
// (the generated parser requires nothing).
function loadParser(src, file) {
  const m = new ParserModule(file, module);
  m.filename = file;
  m._compile(src, file);
  m.loaded = true;
  return m;
}

function memoizeConditionParser() {
  try {
    const {src, rules} = memoizedParserSource(parserFs.readFileSync(parserFile, 'utf8'));
    if (rules === 0) {
      console.error('dynalite: condition parser not memoized: not the generated shape expected');
      return 0;
    }
    parserMemo = loadParser(src, parserFile);
    require.cache[parserFile] = parserMemo;
    return rules;
  } catch (err) {
    console.error('dynalite: condition parser not memoized: ' + err.message);
    return 0;
  }
}

// parserIsUsed says dynalite's request validation required the memoized
// parser (it is among that module's children).
function parserIsUsed() {
  const v = require.cache[parserPath.join(parserDir, '..', 'validations', 'index.js')];
  return !!(v && parserMemo && v.children.includes(parserMemo));
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
	// memoRules is how many rules of dynalite's condition parser were
	// memoized at start (parserMemoJS); 0 when it runs unmemoized.
	memoRules int
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
			if n, ok := strings.CutPrefix(sc.Text(), "MEMO "); ok {
				d.memoRules, _ = strconv.Atoi(n)
			}
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
