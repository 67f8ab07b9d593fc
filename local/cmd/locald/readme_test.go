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
