package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// example is one "$ command" of a README console block and the output the
// README shows for it.
type example struct {
	line int // in README.md
	cmd  string
	want string
}

// readmeExamples returns every command of the README's ```console blocks
// that talks to the local API (localhost:8080).
func readmeExamples(tb testing.TB) []example {
	tb.Helper()
	data, err := os.ReadFile("../../../README.md")
	if err != nil {
		tb.Fatal(err)
	}
	var (
		out     []example
		inBlock bool
		cur     *example
	)
	flush := func() {
		if cur != nil {
			cur.want = strings.TrimRight(cur.want, "\n")
			out = append(out, *cur)
			cur = nil
		}
	}
	for i, line := range strings.Split(string(data), "\n") {
		switch {
		case line == "```console":
			inBlock = true
		case inBlock && line == "```":
			flush()
			inBlock = false
		case inBlock && strings.HasPrefix(line, "$ "):
			flush()
			cur = &example{line: i + 1, cmd: strings.TrimPrefix(line, "$ ")}
		case inBlock && cur != nil:
			cur.want += line + "\n"
		}
	}
	var api []example
	for _, e := range out {
		if strings.Contains(e.cmd, "localhost:8080") {
			api = append(api, e)
		}
	}
	return api
}

var (
	timeRE  = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z`)
	tokenRE = regexp.MustCompile(`\b\d{13,}\b`)
)

// normalize hides what differs from run to run: timestamps and fencing
// tokens (microsecond-based, so always 13+ digits).
func normalize(s string) string {
	return tokenRE.ReplaceAllString(timeRE.ReplaceAllString(s, "<time>"), "<token>")
}

// TestReadmeExamples runs the README's curl examples, in order and in one
// shell (so $TOK carries over), against the real locald binary started as
// plain `make run` starts it, and compares every answer with the README.
// This is the test that catches a default path giving undocumented answers.
func TestReadmeExamples(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"bash", "curl", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed to run the README's examples (.ci/run installs it): %v", tool, err)
		}
	}
	examples := readmeExamples(t)
	if len(examples) < 10 {
		t.Fatalf("found %d README examples against localhost:8080, want the full walk-through (≥ 10)", len(examples))
	}
	p := startLocald(t)
	host := strings.TrimPrefix(p.URL, "http://")

	var script bytes.Buffer
	script.WriteString("set -u\n")
	for i, e := range examples {
		fmt.Fprintf(&script, "echo '@@@ %d'\n%s\necho\n", i, strings.ReplaceAll(e.cmd, "localhost:8080", host))
	}
	cmd := exec.Command("bash", "-c", script.String())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the examples failed as a script: %v\n%s", err, out)
	}
	parts := regexp.MustCompile(`(?m)^@@@ \d+\n`).Split(string(out), -1)[1:]
	if len(parts) != len(examples) {
		t.Fatalf("got output for %d commands, want %d:\n%s", len(parts), len(examples), out)
	}
	for i, e := range examples {
		got := normalize(strings.TrimRight(parts[i], "\n"))
		want := normalize(e.want)
		if got != want {
			t.Errorf("README.md:%d: $ %s\ngot:\n%s\nwant:\n%s", e.line, e.cmd, got, want)
		}
	}
}

// TestReadmeSigV4Example runs the signed-curl block of docs/deploy.md
// (Calling the API) against locald, which ignores signatures but answers as the service does,
// with made-up keys, through a curl that records its arguments: the block
// must work as pasted (but for $API), and the secret key and session token
// must never be on curl's command line.
func TestReadmeSigV4Example(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	block := ""
	for _, b := range strings.Split(string(data), "```sh\n")[1:] {
		if b, _, _ = strings.Cut(b, "```\n"); strings.Contains(b, "--aws-sigv4") {
			block = b
		}
	}
	if block == "" {
		t.Fatal("docs/deploy.md has no ```sh block with --aws-sigv4")
	}
	realCurl, err := exec.LookPath("curl")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	argv := dir + "/argv"
	wrapper := "#!/bin/sh\nprintf '%s\\n' \"$*\" >> " + argv + "\nexec " + realCurl + " \"$@\"\n"
	if err := os.WriteFile(dir+"/curl", []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	p := startLocald(t)
	script := regexp.MustCompile(`(?m)^API=.*$`).ReplaceAllString(block, "API="+p.URL)
	const secret, session = "SeCrEt/KEY+42", "SeSsIoN/ToKeN=="
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"),
		"AWS_ACCESS_KEY_ID=AKIAEXAMPLE", "AWS_SECRET_ACCESS_KEY="+secret, "AWS_SESSION_TOKEN="+session)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the block failed: %v\n%s", err, out)
	}
	got := normalize(string(out))
	for _, want := range []string{`"owner":"worker-1","fencing_token":<token>`, `{"renewed":true,"lock":{`} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %s:\n%s", want, got)
		}
	}
	args, err := os.ReadFile(argv)
	if err != nil || strings.Count(string(args), "--aws-sigv4") != 4 {
		t.Fatalf("curl ran %q, want 4 signed calls (%v)", args, err)
	}
	for _, s := range []string{secret, session} {
		if strings.Contains(string(args), s) {
			t.Errorf("curl's arguments carry %q:\n%s", s, args)
		}
	}
}

// cronLines returns the ```cron block of each document, which must hold
// one crontab line.
func cronLines(tb testing.TB, docs ...string) []string {
	tb.Helper()
	var lines []string
	for _, doc := range docs {
		data, err := os.ReadFile("../../../" + doc)
		if err != nil {
			tb.Fatal(err)
		}
		blocks := regexp.MustCompile("(?ms)^```cron\n(.*?)^```").FindAllStringSubmatch(string(data), -1)
		if len(blocks) != 1 || strings.Count(blocks[0][1], "\n") != 1 {
			tb.Fatalf("%s: got %d ```cron blocks, want one of one line", doc, len(blocks))
		}
		lines = append(lines, strings.TrimSuffix(blocks[0][1], "\n"))
	}
	return lines
}

// installLines returns the `make install` lines of docs/lockctl.md's
// Install block: the default one, then the user's (PREFIX=$HOME/.local).
func installLines(tb testing.TB) []string {
	tb.Helper()
	data, err := os.ReadFile("../../../docs/lockctl.md")
	if err != nil {
		tb.Fatal(err)
	}
	m := regexp.MustCompile("(?ms)^## Install\n\n```sh\n(.*?)^```").FindSubmatch(data)
	if m == nil {
		tb.Fatal("docs/lockctl.md: no ```sh block at the start of ## Install")
	}
	var lines []string
	for _, l := range strings.Split(string(m[1]), "\n") {
		if strings.HasPrefix(l, "make install") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 2 || !strings.Contains(lines[1], "PREFIX=$HOME/.local") {
		tb.Fatalf("docs/lockctl.md: got the install lines %q, want make install and make install PREFIX=$HOME/.local", lines)
	}
	return lines
}

// makeEnv is the environment for a make started by a test: without the
// variables of a make that may be running the tests (its jobserver).
func makeEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		switch name, _, _ := strings.Cut(kv, "="); name {
		case "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "GNUMAKEFLAGS", "MAKEOVERRIDES", "PREFIX", "BINDIR":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// TestReadmeCronExample runs the cron line of the README (and of
// docs/lockctl.md, which must be the same) as cron would: lockctl
// installed by `make install`, the command run by /bin/sh with cron's
// PATH. The line must call lockctl where `make install` puts it by default;
// the test installs it under a temporary PREFIX instead and puts that path,
// a script of its own and locald's address in place of the line's. The
// job must run with its fencing token and print nothing, and a second run
// while another host holds the lock must exit 0, print nothing and not
// run the job: cron mails any output.
func TestReadmeCronExample(t *testing.T) {
	t.Parallel()
	lines := cronLines(t, "README.md", "docs/lockctl.md")
	if lines[0] != lines[1] {
		t.Fatalf("the cron lines differ:\nREADME.md:        %s\ndocs/lockctl.md:  %s", lines[0], lines[1])
	}
	m := regexp.MustCompile(`^(?:\S+\s+){5}((?:[A-Z_]+=\S+\s+)*)(\S+)\s(.*)$`).FindStringSubmatch(lines[0])
	if m == nil {
		t.Fatalf("%q is not a crontab line (five time fields, then VAR=value… lockctl ARGS)", lines[0])
	}
	assignments, program, args := m[1], m[2], m[3]

	// Where `make install` puts lockctl by default.
	eval := exec.Command("make", "-s", "--no-print-directory", "-C", "../../..", "--eval", "print-bindir: ; @echo $(abspath $(BINDIR))", "print-bindir")
	eval.Env = makeEnv()
	out, err := eval.Output()
	if err != nil {
		t.Fatalf("make print-bindir: %v", err)
	}
	if want := strings.TrimSpace(string(out)) + "/lockctl"; program != want {
		t.Fatalf("the cron line calls %s; `make install` puts lockctl at %s", program, want)
	}

	// docs/lockctl.md's install lines, as written, in the checkout: the
	// default one with PREFIX in the environment (make's ?= takes it)
	// instead of /usr/local, the user's with HOME a temporary directory.
	// Go's caches and settings stay where they are (under the real HOME),
	// and the module cache is all there is (GOPROXY=off).
	dir := t.TempDir()
	goEnv, err := exec.Command("go", "env", "GOPATH", "GOMODCACHE", "GOCACHE", "GOENV").Output()
	if err != nil {
		t.Fatalf("go env: %v", err)
	}
	env := makeEnv()
	for i, v := range strings.Split(strings.TrimSpace(string(goEnv)), "\n") {
		env = append(env, []string{"GOPATH=", "GOMODCACHE=", "GOCACHE=", "GOENV="}[i]+v)
	}
	env = append(env, "GOPROXY=off")
	installs := installLines(t)
	for _, tt := range []struct {
		line, env, bin string
	}{
		{line: installs[0], env: "PREFIX=" + dir + "/usr", bin: dir + "/usr/bin/lockctl"},
		{line: installs[1], env: "HOME=" + dir, bin: dir + "/.local/bin/lockctl"},
	} {
		install := exec.Command("bash", "-ec", tt.line)
		install.Dir, install.Env = "../../..", append(slices.Clip(env), tt.env)
		if out, err := install.CombinedOutput(); err != nil || !strings.Contains(string(out), "installed "+tt.bin) {
			t.Fatalf("%s, with %s: %v\n%s", tt.line, tt.env, err, out)
		}
		// Built from a git checkout, it names the commit, not "(devel)" (Go
		// stamps none with GOFLAGS=-buildvcs=false or in a git worktree).
		if head, err := exec.Command("git", "-C", "../../..", "rev-parse", "--short=12", "HEAD").Output(); err == nil {
			out, err := exec.Command(tt.bin, "version").Output()
			if want := strings.TrimSpace(string(head)); err != nil || !strings.Contains(string(out), want) {
				t.Errorf("%s version: got %q (%v), want it to name commit %s", tt.bin, out, err, want)
			}
		}
	}
	lockctl := dir + "/.local/bin/lockctl"

	const endpoint, job = "LOCKS_ENDPOINT=http://127.0.0.1:8080 ", "/usr/local/bin/report.sh"
	if assignments != endpoint || !strings.Contains(args, " -- "+job) {
		t.Fatalf("the cron line is %q; this test knows one that sets %q and runs %s", lines[0], endpoint, job)
	}
	p := startLocald(t)
	ran := dir + "/ran"
	script := dir + "/report.sh"
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho \"$LOCK_RESOURCE $LOCK_FENCING_TOKEN\" > "+ran+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	command := "LOCKS_ENDPOINT=" + p.URL + " " + lockctl + " " + strings.Replace(args, job, script, 1)
	cron := func() (string, error) {
		cmd := exec.Command("/bin/sh", "-c", command)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir, "SHELL=/bin/sh", "LOGNAME=cron"}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	if out, err := cron(); err != nil || out != "" {
		t.Fatalf("$ %s\nexit %v, output %q; want exit 0 and no output", command, err, out)
	}
	got, err := os.ReadFile(ran)
	if err != nil || !regexp.MustCompile(`^nightly-report \d{13,}\n$`).Match(got) {
		t.Fatalf("the job wrote %q (%v), want its resource and fencing token", got, err)
	}

	// Another host holds the lock: a silent success, and the job does not run.
	if err := os.Remove(ran); err != nil {
		t.Fatal(err)
	}
	held := exec.Command("curl", "-sf", "-X", "POST", p.URL+"/locks/nightly-report", "-d", `{"owner":"host-b","ttl_seconds":60}`)
	if out, err := held.CombinedOutput(); err != nil || !strings.Contains(string(out), `"acquired":true`) {
		t.Fatalf("another host's acquire: %v %s", err, out)
	}
	if out, err := cron(); err != nil || out != "" {
		t.Errorf("with the lock held elsewhere: exit %v, output %q; want exit 0 and no output", err, out)
	}
	if _, err := os.Stat(ran); !os.IsNotExist(err) {
		t.Errorf("the job ran while another host held the lock (%v)", err)
	}
}
