package goclient_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ft288/locks/internal/doccheck"
)

// Bounds of a consumer's module graph (go list -m all, the consumer
// included).
const (
	// maxModules: the consumer, the client, aws-sdk-go-v2 and smithy-go,
	// with room for two more.
	maxModules = 6
	// maxModulesSigV4: with awsauth, also aws-sdk-go-v2/config and its
	// credential providers: 17 today, one more than the 16 because
	// config v1.32.0 added service/signin. Every module past the consumer,
	// the client and awsauth must be the AWS SDK's (checked below).
	maxModulesSigV4 = 17
)

// TestConsumerModule builds the Go examples of client/README.md as a user
// outside this repository would: each in a scratch module with go 1.25
// beside the checkout (at ../locks), where the README's install lines run
// as written (installEnv: offline). go mod tidy must keep the go line, and
// the module graph must stay within its bound: the client must not drag in
// the service.
func TestConsumerModule(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds two scratch modules")
	}
	clientDir, err := filepath.Abs(filepath.Join("..", "..", "..", "client"))
	if err != nil {
		t.Fatal(err)
	}
	clientGo := goLine(t, filepath.Join(clientDir, "go.mod"))
	if newerGo(clientGo, "1.25") {
		t.Errorf("client/go.mod: go %s, want at most 1.25 (the oldest supported release)", clientGo)
	}
	readme, err := os.ReadFile(filepath.Join(clientDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	programs := goBlocks(string(readme))
	if len(programs) != 2 {
		t.Fatalf("client/README.md: got %d Go programs, want 2 (plain, and signed with awsauth)", len(programs))
	}
	for i, src := range programs {
		sigv4 := strings.Contains(src, `"github.com/ft288/locks/client/awsauth"`)
		if sigv4 != (i == 1) {
			t.Fatalf("client/README.md: program %d imports awsauth: %t, want the second one only", i+1, sigv4)
		}
	}
	install := shBlocks(section(string(readme), "## Install"))
	if len(install) != 1 {
		t.Fatalf("client/README.md: got %d ```sh blocks under ## Install, want 1 (the install lines for both examples)", len(install))
	}
	for _, tt := range []struct {
		name       string
		src        string
		sigv4      bool
		maxModules int
	}{
		{name: "Client", src: programs[0], maxModules: maxModules},
		{name: "ClientWithAWSAuth", src: programs[1], sigv4: true, maxModules: maxModulesSigV4},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := besideCheckout(t, filepath.Dir(clientDir))
			write(t, filepath.Join(dir, "go.mod"), "module example.com/consumer\n\ngo "+clientGo+"\n")
			write(t, filepath.Join(dir, "main.go"), tt.src)
			runLines(t, dir, "client/README.md", install[0])
			if got := goLine(t, filepath.Join(dir, "go.mod")); newerGo(got, clientGo) {
				t.Errorf("go mod tidy raised the consumer's go line to %s, want the client's %s", got, clientGo)
			}
			mods := strings.Fields(goCmd(t, dir, "list", "-m", "-f", "{{.Path}}", "all"))
			t.Logf("%d modules: %s", len(mods), strings.Join(mods, " "))
			if len(mods) > tt.maxModules {
				t.Errorf("go list -m all: got %d modules, want at most %d", len(mods), tt.maxModules)
			}
			for _, m := range mods {
				switch {
				case m == "example.com/consumer", m == "github.com/ft288/locks/client":
				case m == "github.com/ft288/locks/client/awsauth" && tt.sigv4:
				case m == "github.com/aws/aws-sdk-go-v2", m == "github.com/aws/smithy-go":
				case strings.HasPrefix(m, "github.com/aws/aws-sdk-go-v2/") && tt.sigv4:
				default:
					t.Errorf("module %s in the consumer's graph; want only the client's and the AWS SDK's", m)
				}
			}
			goCmd(t, dir, "vet", "./...")
			bin := filepath.Join(dir, "consumer")
			if runtime.GOOS == "windows" {
				bin += ".exe"
			}
			goCmd(t, dir, "build", "-o", bin, ".")
			if fi, err := os.Stat(bin); err == nil {
				t.Logf("binary: %.1f MB", float64(fi.Size())/1e6)
			}
		})
	}
}

// TestReadmeGoInstall runs the Go example of the main README with its
// install lines as written: in a fresh module (go mod init) beside the
// checkout (at ../locks), offline (installEnv), the program saved as the
// lines' comment says; their go run must run it against the local runner.
func TestReadmeGoInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a scratch module")
	}
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	var readme []doccheck.Block
	for _, b := range docBlocks(t, root) {
		if b.File == "README.md" {
			readme = append(readme, b)
		}
	}
	i := slices.IndexFunc(readme, func(b doccheck.Block) bool { return b.Lang == "go" })
	if i < 0 || i+1 == len(readme) || readme[i+1].Lang != "sh" {
		t.Fatal("README.md: no Go example followed by a ```sh block of its install lines")
	}
	program, lines := readme[i].Body, readme[i+1].Body
	file := regexp.MustCompile(`save as (\S+\.go)\b`).FindStringSubmatch(program)
	if file == nil {
		t.Fatalf("README.md: the Go example does not say which file to save it as (\"save as main.go\"):\n%s", program)
	}
	dir := besideCheckout(t, root)
	initCmd := exec.Command("go", "mod", "init", "example.com/report")
	initCmd.Dir, initCmd.Env = dir, installEnv()
	if out, err := initCmd.CombinedOutput(); err != nil {
		t.Fatalf("go mod init: %v\n%s", err, out)
	}
	write(t, filepath.Join(dir, file[1]), program)
	out := runLines(t, dir, "README.md", lines, "LOCKS_ENDPOINT="+endpoint())
	if !regexp.MustCompile(`(?m)report written with fencing token \d+$`).MatchString(out) {
		t.Errorf("README.md's Go example printed %q, want the report line", out)
	}
}

// besideCheckout returns a new empty directory that has the checkout at
// root beside it as ../locks, where the documents' install lines expect it.
func besideCheckout(tb testing.TB, root string) string {
	tb.Helper()
	tmp := tb.TempDir()
	if err := os.Symlink(root, filepath.Join(tmp, "locks")); err != nil {
		tb.Fatal(err)
	}
	dir := filepath.Join(tmp, "project")
	if err := os.Mkdir(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	return dir
}

// installEnv is the environment the documents' install lines run in: a
// user's, outside this repository's workspace and toolchain, and offline.
// GOPROXY=off: modules come from the module cache alone (make deps fills
// it); GOSUMDB=off: the checksum database is not asked either, so the
// go.sum lines come from the cache, whose modules were checked against the
// repository's go.sum files when make deps downloaded them.
func installEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		switch name, _, _ := strings.Cut(kv, "="); name {
		case "GOFLAGS", "GOWORK", "GOPROXY", "GOSUMDB", "GOTOOLCHAIN", "LOCKS_ENDPOINT", "LOCKS_SIGV4":
			continue
		}
		env = append(env, kv)
	}
	return append(env, append([]string{"GOWORK=off", "GOTOOLCHAIN=local", "GOPROXY=off", "GOSUMDB=off"}, extra...)...)
}

// runLines runs lines, a ```sh block of doc, with bash -e in dir and
// installEnv plus extra, and returns their combined output.
func runLines(tb testing.TB, dir, doc, lines string, extra ...string) string {
	tb.Helper()
	cmd := exec.Command("bash", "-ec", lines)
	cmd.Dir, cmd.Env = dir, installEnv(extra...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		tb.Fatalf("%s's lines, run in %s:\n%s\nfailed: %v\n%s", doc, dir, lines, err, out)
	}
	return string(out)
}

// section returns the part of markdown from the heading to the next
// heading of its level or higher (empty without the heading).
func section(markdown, heading string) string {
	i := strings.Index(markdown, "\n"+heading+"\n")
	if i < 0 {
		return ""
	}
	rest := markdown[i+len(heading)+2:]
	level := strings.Repeat("#", strings.Count(strings.Fields(heading)[0], "#"))
	if j := regexp.MustCompile(`(?m)^#{1,` + strconv.Itoa(len(level)) + `} `).FindStringIndex(rest); j != nil {
		rest = rest[:j[0]]
	}
	return rest
}

// shBlocks returns the bodies of the ```sh blocks of markdown.
func shBlocks(markdown string) []string {
	var out []string
	for _, m := range regexp.MustCompile("(?ms)^```sh\n(.*?)^```").FindAllStringSubmatch(markdown, -1) {
		out = append(out, m[1])
	}
	return out
}

// goBlocks returns the ```go blocks of markdown that are whole programs.
func goBlocks(markdown string) []string {
	var out []string
	for _, m := range regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(markdown, -1) {
		if strings.HasPrefix(m[1], "package main\n") {
			out = append(out, m[1])
		}
	}
	return out
}

// goLine returns the go directive's version in the go.mod file at path.
func goLine(tb testing.TB, path string) string {
	tb.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(data)
	if m == nil {
		tb.Fatalf("%s: no go line", path)
	}
	return string(m[1])
}

// newerGo reports whether Go version a (1.25, 1.26.8) is newer than b.
func newerGo(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < max(len(as), len(bs)); i++ {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x > y
		}
	}
	return false
}

// write writes content to the file at path.
func write(tb testing.TB, path, content string) {
	tb.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		tb.Fatal(err)
	}
}

// goCmd runs the go command in dir as a consumer outside this repository
// would (no workspace, no toolchain switch, go.mod updated as needed) and
// returns its standard output.
func goCmd(tb testing.TB, dir string, args ...string) string {
	tb.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOTOOLCHAIN=local", "GOFLAGS=-mod=mod")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}
