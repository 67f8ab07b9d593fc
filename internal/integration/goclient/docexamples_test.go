package goclient_test

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ft288/locks/internal/doccheck"
	"github.com/ft288/locks/internal/testenv"
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

// TestDocExamples runs every ```go block of the README, docs/ and
// client/README.md as its own program, as a reader would paste it: each
// in a package of a scratch module that requires the client and awsauth
// from the checkout through replace directives, run with `go run` against
// the local runner (LOCKS_ENDPOINT), with the test's dynalite as
// DYNAMODB_ENDPOINT for the examples that write to DynamoDB. A block that is not a whole program
// (package main with func main) fails: mark such a block ```text.
// `go run -trimpath` caches each program's executable, so only a changed
// example or client is compiled and linked again.
func TestDocExamples(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	var programs []doccheck.Block
	for _, b := range docBlocks(t, root) {
		if b.Lang != "go" {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), b.String(), b.Body, parser.SkipObjectResolution)
		if err != nil {
			t.Errorf("%s: a ```go block that does not parse as a Go file (%v): make it a whole program, or mark it ```text", b, err)
			continue
		}
		if f.Name.Name != "main" || !hasMain(f) {
			t.Errorf("%s: a ```go block that is not a program (package main with func main): make it one, or mark it ```text", b)
			continue
		}
		programs = append(programs, b)
	}
	if len(programs) < 5 {
		t.Fatalf("found %d Go programs in the documents, want at least the README's, client/README.md's 2 and docs/clients.md's 2", len(programs))
	}
	if t.Failed() {
		return
	}

	dir := t.TempDir()
	clientDir := filepath.Join(root, "client")
	// The examples of docs/fencing.md write to DynamoDB: they get the
	// service's versions of the SDK's DynamoDB modules.
	sdk := requirements(t, filepath.Join(root, "go.mod"),
		"github.com/aws/aws-sdk-go-v2/service/dynamodb", "github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression")
	write(t, filepath.Join(dir, "go.mod"), "module example.com/docs\n\ngo 1.25\n\n"+
		"require (\n\tgithub.com/ft288/locks/client v0.0.0-00010101000000-000000000000\n"+
		"\tgithub.com/ft288/locks/client/awsauth v0.0.0-00010101000000-000000000000\n"+sdk+")\n\n"+
		"replace github.com/ft288/locks/client => "+clientDir+"\n\n"+
		"replace github.com/ft288/locks/client/awsauth => "+filepath.Join(clientDir, "awsauth")+"\n")
	// awsauth's go.sum covers the client's requirements and its own, the
	// service's the DynamoDB modules.
	var sums []string
	for _, f := range []string{filepath.Join(clientDir, "awsauth", "go.sum"), filepath.Join(root, "go.sum")} {
		sum, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sums = append(sums, strings.Split(strings.TrimSpace(string(sum)), "\n")...)
	}
	slices.Sort(sums)
	write(t, filepath.Join(dir, "go.sum"), strings.Join(slices.Compact(sums), "\n")+"\n")
	// The AWS default chain finds made-up keys in the environment and
	// nothing else; the local runner does not check signatures.
	aws := t.TempDir()
	env := append(os.Environ(), "GOWORK=off", "GOTOOLCHAIN=local", "GOFLAGS=-mod=mod",
		"LOCKS_ENDPOINT="+endpoint(), "LOCKS_SIGV4=", "DYNAMODB_ENDPOINT="+testenv.Endpoint(),
		"AWS_ACCESS_KEY_ID=AKIAEXAMPLE", "AWS_SECRET_ACCESS_KEY=made/up+secret", "AWS_SESSION_TOKEN=",
		"AWS_REGION=eu-west-1", "AWS_DEFAULT_REGION=", "AWS_PROFILE=", "AWS_EC2_METADATA_DISABLED=true",
		"AWS_CONFIG_FILE="+filepath.Join(aws, "config"), "AWS_SHARED_CREDENTIALS_FILE="+filepath.Join(aws, "credentials"))
	for i, b := range programs {
		pkg := fmt.Sprintf("ex%d", i+1)
		if err := os.Mkdir(filepath.Join(dir, pkg), 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, pkg, "main.go"), b.Body)
		// One at a time: the examples share their lock names.
		t.Run(strings.NewReplacer("/", "_", ".md", "").Replace(b.String()), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			start := time.Now()
			cmd := exec.CommandContext(ctx, "go", "run", "-trimpath", "./"+pkg)
			cmd.Dir, cmd.Env = dir, env
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s: go run: %v\n%s", b, err, out)
			}
			t.Logf("%s: %s\n%s", b, time.Since(start).Round(time.Millisecond), out)
		})
	}
}

// requirements returns the require lines of the go.mod file at path for
// the modules named, one a line, or fails the test if one is missing.
func requirements(tb testing.TB, path string, modules ...string) string {
	tb.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	var b strings.Builder
	for _, m := range modules {
		v := regexp.MustCompile(`(?m)^\s*(?:require\s+)?` + regexp.QuoteMeta(m) + `\s+(v\S+)`).FindSubmatch(data)
		if v == nil {
			tb.Fatalf("%s requires no %s", path, m)
		}
		fmt.Fprintf(&b, "\t%s %s\n", m, v[1])
	}
	return b.String()
}

// hasMain reports whether f declares func main.
func hasMain(f *ast.File) bool {
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && fn.Name.Name == "main" {
			return true
		}
	}
	return false
}
