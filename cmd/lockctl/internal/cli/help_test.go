package cli

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// flagEntries returns the flag entries of `lockctl NAME --help`, each the
// flag's line and its usage line joined by a space.
func flagEntries(tb testing.TB, name string) map[string]string {
	tb.Helper()
	var out, errOut bytes.Buffer
	env := Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut, Getenv: func(string) string { return "" }}
	if code := Main([]string{name, "--help"}, env); code != ExitOK {
		tb.Fatalf("lockctl %s --help: got exit %d, want %d (stderr %q)", name, code, ExitOK, errOut.String())
	}
	entries := map[string]string{}
	lines := strings.Split(out.String(), "\n")
	for i, l := range lines {
		if m := regexp.MustCompile(`^  (?:-\w, )?--([\w-]+)`).FindStringSubmatch(l); m != nil && i+1 < len(lines) {
			entries[m[1]] = strings.TrimSpace(l) + " " + strings.TrimSpace(lines[i+1])
		}
	}
	return entries
}

// TestHelpStatesEachDefaultOnce checks every flag of every command: its
// help entry states its default at most once (`lockctl run --help` printed
// "(… default 10 or that) (default 10s)" for --grace).
func TestHelpStatesEachDefaultOnce(t *testing.T) {
	// "default" as a word of the usage that is not a default of the flag.
	notADefault := regexp.MustCompile(`default chain|by default`)
	flags := 0
	for _, c := range commands {
		t.Run(c.name, func(t *testing.T) {
			for flag, entry := range flagEntries(t, c.name) {
				flags++
				if n := strings.Count(notADefault.ReplaceAllString(entry, ""), "default"); n > 1 {
					t.Errorf("lockctl %s --help, --%s: got %d defaults in %q, want at most one", c.name, flag, n, entry)
				}
			}
		})
	}
	if flags < 30 {
		t.Errorf("got %d flag entries across the commands' help, want at least 30 (does the parsing still match?)", flags)
	}
}

// TestHelpShownDefaults checks the flags whose default is not one value:
// help shows the rule, once.
func TestHelpShownDefaults(t *testing.T) {
	tests := []struct {
		cmd, flag, want string
	}{
		{"run", "grace", "--grace SECONDS after a lost lease, seconds from SIGTERM to SIGKILL, inside the lease, at most ttl/2 − min(ttl/10, 1s) (default 10s, or that limit when it is less)"},
		{"elect", "grace", "(default 10s, or that limit when it is less)"},
		{"run", "owner", "--owner OWNER the lease's owner (default HOST:PID:RANDOM, unique)"},
		{"acquire", "owner", "--owner OWNER the lease's owner (default HOST:PID:RANDOM, unique)"},
		{"run", "ttl", "(default 30s)"},
		{"run", "held-exit", "(default 75)"},
	}
	for _, tt := range tests {
		t.Run(tt.cmd+"_"+tt.flag, func(t *testing.T) {
			entry, ok := flagEntries(t, tt.cmd)[tt.flag]
			if !ok {
				t.Fatalf("lockctl %s --help: no --%s", tt.cmd, tt.flag)
			}
			if !strings.HasSuffix(entry, tt.want) {
				t.Errorf("lockctl %s --help, --%s: got %q, want it to end with %q", tt.cmd, tt.flag, entry, tt.want)
			}
		})
	}
}
