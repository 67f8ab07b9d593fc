package doccheck

import (
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// root is the repository's root, from this package's directory.
const root = "../.."

// repoFiles lists the repository's files, or fails the test.
func repoFiles(tb testing.TB) []string {
	tb.Helper()
	files, err := RepoFiles(root)
	if err != nil {
		tb.Fatalf("%v (the checks read the file list from git)", err)
	}
	return files
}

// report fails tb with every problem, one a line.
func report(tb testing.TB, what string, problems []Problem) {
	tb.Helper()
	if len(problems) == 0 {
		return
	}
	var b strings.Builder
	for _, p := range problems {
		b.WriteString("\n" + p.String())
	}
	tb.Errorf("%s: %d problems:%s", what, len(problems), b.String())
}

// TestLinks checks every relative link and #anchor of every Markdown file
// of the repository.
func TestLinks(t *testing.T) {
	t.Parallel()
	files := repoFiles(t)
	n := 0
	for _, f := range files {
		if IsMarkdown(f) {
			n++
		}
	}
	if n < 10 {
		t.Fatalf("found %d Markdown files, want the README, docs/ and the clients' (≥ 10)", n)
	}
	problems, err := Links(root, files)
	if err != nil {
		t.Fatal(err)
	}
	report(t, "broken links", problems)
}

// TestContents checks the table of contents of every document in docs/.
func TestContents(t *testing.T) {
	t.Parallel()
	var docs int
	for _, f := range repoFiles(t) {
		if path.Dir(f) != "docs" || !IsMarkdown(f) {
			continue
		}
		docs++
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		report(t, f, Contents(f, b))
	}
	if docs == 0 {
		t.Fatal("no documents in docs/")
	}
}

// TestLicense checks LICENSE and every package manifest.
func TestLicense(t *testing.T) {
	t.Parallel()
	problems, err := Licenses(root, repoFiles(t))
	if err != nil {
		t.Fatal(err)
	}
	report(t, "license", problems)
}

func TestSlug(t *testing.T) {
	t.Parallel()
	tests := []struct{ heading, want string }{
		{"The API", "the-api"},
		{"Data model: one item per resource", "data-model-one-item-per-resource"},
		{"Reserved concurrency (`-c reserve=true`)", "reserved-concurrency--c-reservetrue"},
		{"Once per account and region: `cdk bootstrap`", "once-per-account-and-region-cdk-bootstrap"},
		{"Fencing tokens, and why release keeps a tombstone", "fencing-tokens-and-why-release-keeps-a-tombstone"},
		{"The seed design's attacks", "the-seed-designs-attacks"},
		{"What `make test` runs", "what-make-test-runs"},
		{"The local runner (`make run`)", "the-local-runner-make-run"},
		{"Clients: Go, TypeScript, Python and the shell", "clients-go-typescript-python-and-the-shell"},
		{"`snake_case` and _emphasis_ and **bold**", "snake_case-and-emphasis-and-bold"},
		{"A [link](other.md#x) in a heading", "a-link-in-a-heading"},
		{"Ünïcødé & emoji 🔒 stay letters", "ünïcødé--emoji--stay-letters"},
		{"v1.2 — what's new?", "v12--whats-new"},
		{"  padded  ", "padded"},
	}
	for _, tt := range tests {
		if got := Slug(tt.heading); got != tt.want {
			t.Errorf("Slug(%q): got %q, want %q", tt.heading, got, tt.want)
		}
	}
}

func TestHeadings(t *testing.T) {
	t.Parallel()
	doc := "# Title\n\nText\n\n## Notes\n\n```md\n## Not a heading\n```\n\n## Notes\n\n### Notes ###\n\n## Notes-1\n\n" +
		"Setext\n------\n\n- a list item\n---\n\n#no-space\n"
	var got []string
	for _, h := range Headings([]byte(doc)) {
		got = append(got, h.Anchor)
	}
	// A written-out "Notes-1" after the generated notes-1 becomes
	// notes-1-1, as github-slugger numbers it.
	want := []string{"title", "notes", "notes-1", "notes-2", "notes-1-1", "setext"}
	if !slices.Equal(got, want) {
		t.Errorf("got anchors %q, want %q", got, want)
	}
}

// TestLinksFindBrokenOnes runs the checker over a made-up repository with
// one link of each kind, good and broken, and checks it reports exactly
// the broken ones.
func TestLinksFindBrokenOnes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("README.md", `# Project

## Install it

- [good file](docs/guide.md) and [good anchor](docs/guide.md#step-two-go)
- [good own anchor](#install-it), [good dir](docs/), [good line](main.go#L3)
- [good duplicate](docs/guide.md#notes-1), [good HTML anchor](docs/guide.md#custom)
- [https is not followed](https://example.com/missing) and <https://example.com>
- `+"`[in a code span](missing.md)`"+`

`+"```"+`
[in a code block](missing.md)
`+"```"+`

- [broken file](docs/missing.md)
- [broken anchor](docs/guide.md#step-three)
- [broken own anchor](#install)
- [broken duplicate](docs/guide.md#notes-2)
- [anchor into code](main.go#main)
- [outside](../elsewhere.md)
- [ignored file](bin/tool)

[ref]: docs/gone.md
`)
	write("docs/guide.md", "# Guide\n\n## Step two: go!\n\n## Notes\n\n## Notes\n\n<a id=\"custom\"></a>\n[back](../README.md#project)\n")
	write("main.go", "package main\n\nfunc main() {}\n")
	write("bin/tool", "#!/bin/sh\n")
	write(".gitignore", "/bin/\n")
	if out, err := exec.Command("git", "-C", dir, "init", "-q").CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	files, err := RepoFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	problems, err := Links(dir, files)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.String())
	}
	want := []string{
		`README.md:15: link "docs/missing.md": no file docs/missing.md in the repository`,
		`README.md:16: link "docs/guide.md#step-three": docs/guide.md has no heading with anchor #step-three`,
		`README.md:17: link "#install": README.md has no heading with anchor #install`,
		`README.md:18: link "docs/guide.md#notes-2": docs/guide.md has no heading with anchor #notes-2`,
		`README.md:19: link "main.go#main": anchor #main into main.go, which is not Markdown (only #L… line anchors work there)`,
		`README.md:20: link "../elsewhere.md" leaves the repository`,
		`README.md:21: link "bin/tool": no file bin/tool in the repository`,
		`README.md:23: link "docs/gone.md": no file docs/gone.md in the repository`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("got problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestContentsFindsProblems(t *testing.T) {
	t.Parallel()
	good := "# Doc\n\n- [One](#one)\n  - [Sub](#sub)\n- [Two](#two)\n\n## One\n\n### Sub\n\n#### Deep\n\n## Two\n"
	if p := Contents("good.md", []byte(good)); len(p) != 0 {
		t.Errorf("a complete table of contents: got %v, want none", p)
	}
	tests := []struct{ name, doc, want string }{
		{"Missing", "# Doc\n\n- [One](#one)\n\n## One\n\n## Two\n", `bad.md:7: heading "Two" (#two) is not in the table of contents`},
		{"Extra", "# Doc\n\n- [One](#one)\n- [Gone](#gone)\n\n## One\n", "bad.md:4: contents entry #gone names no ## or ### heading after the last one listed"},
		{"Order", "# Doc\n\n- [Two](#two)\n- [One](#one)\n\n## One\n\n## Two\n", `bad.md:3: contents entry #two: want #one ("One"), the next ## or ### heading`},
		{"Indent", "# Doc\n\n- [One](#one)\n- [Sub](#sub)\n\n## One\n\n### Sub\n", "bad.md:4: contents entry #sub: a level-3 heading, want it indented under its section"},
		{"None", "# Doc\n\n## One\n", "bad.md:1: no table of contents (a list of links to the ## and ### headings before the first of them)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, p := range Contents("bad.md", []byte(tt.doc)) {
				got = append(got, p.String())
			}
			if len(got) != 1 || got[0] != tt.want {
				t.Errorf("got %q, want [%q]", got, tt.want)
			}
		})
	}
}

func TestLicenseFindsProblems(t *testing.T) {
	t.Parallel()
	text, err := os.ReadFile(filepath.Join(root, "LICENSE"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string]string{
		"LICENSE":                 string(text),
		"package.json":            `{"private": true, "license": "Apache-2.0"}`,
		"js/package.json":         `{"license": "MIT"}`,
		"js/LICENSE":              string(text),
		"py/pyproject.toml":       "[project]\nname = \"x\"\nlicense = \"Apache-2.0\"\n",
		"other/pyproject.toml":    "[project]\nname = \"y\"\n",
		"other/LICENSE":           "MIT License\n",
		"docs/package.json.notes": "not a manifest",
	}
	var names []string
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	slices.Sort(names)
	problems, err := Licenses(dir, names)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.String())
	}
	want := []string{
		`js/package.json:1: license "MIT", want "Apache-2.0" as LICENSE`,
		`other/pyproject.toml:1: license "", want "Apache-2.0" as LICENSE`,
		`other/pyproject.toml:1: a package published from other/ must carry a copy of LICENSE there (cp LICENSE other/)`,
		`py/pyproject.toml:1: a package published from py/ must carry a copy of LICENSE there (cp LICENSE py/)`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("got problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	if err := os.WriteFile(filepath.Join(dir, "LICENSE"), []byte("MIT License\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	problems, err = Licenses(dir, names)
	if err != nil || len(problems) != 1 || !strings.Contains(problems[0].Msg, `"Apache License"`) {
		t.Errorf("another license in LICENSE: got %v, %v; want one problem naming the missing title", problems, err)
	}
}

// TestExamples: the fenced blocks of the example documents, with their
// file, line, info string and body; a file missing is an error.
func TestExamples(t *testing.T) {
	dir := t.TempDir()
	for name, doc := range map[string]string{
		"README.md":        "# X\n\n```go\npackage main\n```\n\ntext\n```sh \nlockctl status r\n```\n",
		"client/README.md": "no blocks\n",
		"docs/a.md":        "```\nplain\n```\n",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Examples(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []Block{
		{File: "README.md", Line: 3, Lang: "go", Body: "package main\n"},
		{File: "README.md", Line: 8, Lang: "sh", Body: "lockctl status r\n"},
		{File: "docs/a.md", Line: 1, Lang: "", Body: "plain\n"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if err := os.Remove(filepath.Join(dir, "client", "README.md")); err != nil {
		t.Fatal(err)
	}
	if _, err := Examples(dir); err == nil {
		t.Errorf("got no error without client/README.md, want one")
	}
}
