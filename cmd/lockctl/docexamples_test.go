//go:build unix

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ft288/locks/internal/doccheck"
	"github.com/ft288/locks/internal/testenv"
)

var (
	// callRE matches a shell line that runs lockctl: at the start of a
	// command, after any variable assignments.
	callRE = regexp.MustCompile(`(?m)(^|[;&|(]|\$\()\s*([A-Za-z_][A-Za-z0-9_]*=\S*\s+)*lockctl(\s|$)`)
	// commentRE matches a shell comment.
	commentRE = regexp.MustCompile(`(?m)(^|\s)#.*$`)
	// What differs from run to run in lockctl's output: times, fencing
	// tokens (microsecond-based, so 13+ digits), generated owners and lock
	// set ids.
	timeRE  = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`)
	tokenRE = regexp.MustCompile(`\b\d{13,}\b`)
	ownerRE = regexp.MustCompile(`[^\s"]+:\d+:[0-9a-f]{16}`)
	setIDRE = regexp.MustCompile(`\bset-[0-9a-z]+\b`)
)

// docBlocks returns the fenced blocks of the documents whose examples the
// tests run (doccheck.Examples), or fails the test.
func docBlocks(tb testing.TB, root string) []doccheck.Block {
	tb.Helper()
	blocks, err := doccheck.Examples(root)
	if err != nil {
		tb.Fatal(err)
	}
	return blocks
}

// consoleCommands returns the commands ("$ " lines) of a console block and
// the output shown after each.
func consoleCommands(body string) (cmds, outs []string) {
	for _, line := range strings.SplitAfter(body, "\n") {
		if cmd, ok := strings.CutPrefix(line, "$ "); ok {
			cmds, outs = append(cmds, strings.TrimSuffix(cmd, "\n")), append(outs, "")
		} else if len(outs) > 0 {
			outs[len(outs)-1] += line
		}
	}
	return cmds, outs
}

// callsLockctl reports whether a block runs lockctl: one of its commands
// (a console block's "$ " lines, another block's lines) calls it.
func callsLockctl(b doccheck.Block) bool {
	script := b.Body
	if b.Lang == "console" {
		cmds, _ := consoleCommands(b.Body)
		script = strings.Join(cmds, "\n")
	}
	return callRE.MatchString(commentRE.ReplaceAllString(script, ""))
}

// normalize hides what differs from run to run.
func normalize(s string) string {
	s = timeRE.ReplaceAllString(s, "<time>")
	s = ownerRE.ReplaceAllString(s, "<owner>")
	s = setIDRE.ReplaceAllString(s, "<set>")
	return tokenRE.ReplaceAllString(s, "<token>")
}

// testDocExamples runs every ```sh and ```console block of the README,
// docs/ and client/README.md that calls lockctl, as a reader would paste
// it: with lockctl on PATH and LOCKS_ENDPOINT naming the local runner, in
// a directory with a ./report.sh (the job of the examples), and made-up
// AWS keys for --sigv4 (the local runner does not check signatures). A sh
// block must exit 0, and a job it runs must get its fencing token; a
// console block's commands run in order in one shell, and each must print
// what the block shows, times, tokens and generated owners aside. A block
// of another kind that calls lockctl fails: mark a synopsis ```text. The
// ```cron line is TestReadmeCronExample's (local/cmd/locald).
func testDocExamples(t *testing.T, bin string) {
	srv := testenv.Start(t, testenv.Options{Timeouts: shortWatch}) // `lockctl watch` examples
	var blocks []doccheck.Block
	for _, b := range docBlocks(t, filepath.Join("..", "..")) {
		if !callsLockctl(b) {
			continue
		}
		switch b.Lang {
		case "sh", "console":
			blocks = append(blocks, b)
		case "text", "cron":
		default:
			t.Errorf("%s: a ```%s block that calls lockctl: make it ```sh or ```console, or ```text if it is not a program", b, b.Lang)
		}
	}
	if len(blocks) < 3 {
		t.Fatalf("found %d lockctl examples, want at least the README's and docs/lockctl.md's 2", len(blocks))
	}
	for _, b := range blocks {
		// One at a time: the examples share their lock names.
		t.Run(strings.NewReplacer("/", "_", ".md", "").Replace(b.String()), func(t *testing.T) {
			dir := t.TempDir()
			job := "#!/bin/sh\necho \"$LOCK_RESOURCE $LOCK_FENCING_TOKEN\" >> " + filepath.Join(dir, "ran") + "\n"
			if err := os.WriteFile(filepath.Join(dir, "report.sh"), []byte(job), 0o755); err != nil {
				t.Fatal(err)
			}
			env := append(os.Environ(), "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"), "HOME="+dir,
				"LOCKS_ENDPOINT="+srv.URL, "LOCKS_SIGV4=",
				"AWS_ACCESS_KEY_ID=AKIAEXAMPLE", "AWS_SECRET_ACCESS_KEY=made/up+secret", "AWS_SESSION_TOKEN=",
				"AWS_REGION=", "AWS_DEFAULT_REGION=", "AWS_PROFILE=", "AWS_EC2_METADATA_DISABLED=true",
				"AWS_CONFIG_FILE="+filepath.Join(dir, "aws-config"), "AWS_SHARED_CREDENTIALS_FILE="+filepath.Join(dir, "aws-credentials"))
			if b.Lang == "console" {
				runConsole(t, b, dir, env)
				return
			}
			cmd := exec.Command("sh", "-eu", "-c", b.Body)
			cmd.Dir, cmd.Env = dir, env
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v\n%s", b, err, out)
			}
			if strings.Contains(b.Body, "./report.sh") {
				ran, err := os.ReadFile(filepath.Join(dir, "ran"))
				if err != nil || !regexp.MustCompile(`^\S+ [1-9][0-9]*\n$`).Match(ran) {
					t.Errorf("%s: the job wrote %q (%v), want one line with its resource and fencing token; output:\n%s", b, ran, err, out)
				}
			}
		})
	}
}

// runConsole runs a console block's commands in one shell, in order, and
// compares what each prints (stdout and stderr) with the block.
func runConsole(t *testing.T, b doccheck.Block, dir string, env []string) {
	cmds, outs := consoleCommands(b.Body)
	var script strings.Builder
	for i, c := range cmds {
		fmt.Fprintf(&script, "echo '@@@ %d'\n{ %s\n} 2>&1\n", i, c)
	}
	cmd := exec.Command("sh", "-u", "-c", script.String())
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", b, err, out)
	}
	parts := regexp.MustCompile(`(?m)^@@@ \d+\n`).Split(string(out), -1)[1:]
	if len(parts) != len(cmds) {
		t.Fatalf("%s: got output for %d commands, want %d:\n%s", b, len(parts), len(cmds), out)
	}
	for i, c := range cmds {
		if got, want := normalize(parts[i]), normalize(outs[i]); got != want {
			t.Errorf("%s: $ %s\ngot:\n%swant:\n%s", b, c, got, want)
		}
	}
}
