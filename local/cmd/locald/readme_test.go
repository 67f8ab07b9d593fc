package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
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

// TestReadmeSigV4Example runs the README's signed-curl block (Deploy to AWS)
// against locald, which ignores signatures but answers as the service does,
// with made-up keys, through a curl that records its arguments: the block
// must work as pasted (but for $API), and the secret key and session token
// must never be on curl's command line.
func TestReadmeSigV4Example(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../../README.md")
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
		t.Fatal("README.md has no ```sh block with --aws-sigv4")
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
