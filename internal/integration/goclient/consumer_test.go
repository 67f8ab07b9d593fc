package goclient_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
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
// outside this repository would: each in a scratch module with go 1.25 that
// requires the client (and awsauth) from the checkout through replace
// directives. go mod tidy must keep the go line, and the module graph must
// stay within its bound: the client must not drag in the service. It runs
// the go command with GOFLAGS=-mod=mod against the module cache (make deps
// fills it), so it needs no network once the cache is warm.
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
			dir := t.TempDir()
			gomod := "module example.com/consumer\n\ngo " + clientGo + "\n\n" +
				"require github.com/ft288/locks/client v0.0.0-00010101000000-000000000000\n\n" +
				"replace github.com/ft288/locks/client => " + clientDir + "\n"
			if tt.sigv4 {
				gomod += "\nrequire github.com/ft288/locks/client/awsauth v0.0.0-00010101000000-000000000000\n\n" +
					"replace github.com/ft288/locks/client/awsauth => " + filepath.Join(clientDir, "awsauth") + "\n"
			}
			write(t, filepath.Join(dir, "go.mod"), gomod)
			write(t, filepath.Join(dir, "main.go"), tt.src)
			goCmd(t, dir, "mod", "tidy")
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
