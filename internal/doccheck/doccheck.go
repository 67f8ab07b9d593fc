// Package doccheck checks the repository's Markdown documents the way a
// reader meets them on GitHub: every relative link must reach a file of the
// repository and every #anchor a heading of its target, each file of docs/
// must open with a table of contents that lists its sections, and the
// license the package manifests name must be the one in LICENSE. Its tests
// run these checks over the repository, so `make test` fails on a broken
// link.
package doccheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode"
)

// Problem is one finding, at a line of a file (relative to the root).
type Problem struct {
	File string
	Line int
	Msg  string
}

func (p Problem) String() string { return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Msg) }

// RepoFiles lists the files of the repository at root as git sees them:
// tracked, and untracked ones not ignored (a new document before its first
// commit), slash-separated and relative to root.
func RepoFiles(root string) ([]string, error) {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files in %s: %w", root, err)
	}
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f != "" && !slices.Contains(files, f) {
			if _, err := os.Stat(filepath.Join(root, f)); err == nil { // deleted but not yet committed
				files = append(files, f)
			}
		}
	}
	slices.Sort(files)
	return files, nil
}

// IsMarkdown reports whether name is a Markdown file.
func IsMarkdown(name string) bool {
	ext := strings.ToLower(path.Ext(name))
	return ext == ".md" || ext == ".markdown"
}

// Links checks every Markdown file among files (the repository's, as
// RepoFiles lists them, under root): each relative link must name one of
// files, or a directory holding some, and each #anchor must name a heading
// (or an HTML id) of its target Markdown file. Links with a scheme
// (https:, mailto:) are not followed.
func Links(root string, files []string) ([]Problem, error) {
	exists := map[string]bool{}
	for _, f := range files {
		exists[f] = true
		for d := path.Dir(f); d != "."; d = path.Dir(d) {
			exists[d+"/"] = true
		}
	}
	anchors := map[string]map[string]bool{}
	anchorsOf := func(f string) (map[string]bool, error) {
		if a, ok := anchors[f]; ok {
			return a, nil
		}
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return nil, err
		}
		a := map[string]bool{}
		for _, h := range Headings(b) {
			a[h.Anchor] = true
		}
		for _, id := range htmlIDs(b) {
			a[id] = true
		}
		anchors[f] = a
		return a, nil
	}
	var problems []Problem
	for _, f := range files {
		if !IsMarkdown(f) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return nil, err
		}
		for _, l := range links(b) {
			msg, err := checkLink(f, l.dest, exists, anchorsOf)
			if err != nil {
				return nil, err
			}
			if msg != "" {
				problems = append(problems, Problem{File: f, Line: l.line, Msg: msg})
			}
		}
	}
	return problems, nil
}

// lineAnchor is GitHub's anchor of a line or a range of lines in a file
// view (#L10, #L10-L20, #L10C5-L12C3).
var lineAnchor = regexp.MustCompile(`^L\d+(C\d+)?(-L\d+(C\d+)?)?$`)

// checkLink says what is wrong with dest, a link in the Markdown file f;
// "" when nothing is.
func checkLink(f, dest string, exists map[string]bool, anchorsOf func(string) (map[string]bool, error)) (string, error) {
	if hasScheme(dest) || strings.HasPrefix(dest, "//") {
		return "", nil
	}
	target, frag, hasFrag := strings.Cut(dest, "#")
	target, err := url.PathUnescape(target)
	if err != nil {
		return fmt.Sprintf("link %q: %v", dest, err), nil
	}
	switch {
	case target == "":
		target = f
	case strings.HasPrefix(target, "/"):
		target = path.Clean(strings.TrimPrefix(target, "/")) // GitHub resolves / to the repository root
	default:
		target = path.Join(path.Dir(f), target)
	}
	isDir := false
	switch {
	case target == "." || strings.HasPrefix(target, "../"):
		return fmt.Sprintf("link %q leaves the repository", dest), nil
	case exists[target]:
	case exists[target+"/"]:
		isDir = true
	default:
		return fmt.Sprintf("link %q: no file %s in the repository", dest, target), nil
	}
	if !hasFrag {
		return "", nil
	}
	if frag == "" {
		return fmt.Sprintf("link %q: empty anchor", dest), nil
	}
	if frag, err = url.PathUnescape(frag); err != nil {
		return fmt.Sprintf("link %q: %v", dest, err), nil
	}
	switch {
	case isDir:
		return fmt.Sprintf("link %q: an anchor into a directory", dest), nil
	case !IsMarkdown(target):
		if lineAnchor.MatchString(frag) {
			return "", nil
		}
		return fmt.Sprintf("link %q: anchor #%s into %s, which is not Markdown (only #L… line anchors work there)", dest, frag, target), nil
	}
	a, err := anchorsOf(target)
	if err != nil {
		return "", err
	}
	if !a[frag] {
		return fmt.Sprintf("link %q: %s has no heading with anchor #%s", dest, target, frag), nil
	}
	return "", nil
}

var scheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)

func hasScheme(dest string) bool { return scheme.MatchString(dest) }

// link is one link destination and the line it is on.
type link struct {
	line int
	dest string
}

var (
	// inlineLink matches the destination of [text](dest "title") and
	// ![alt](dest), code spans already removed.
	inlineLink = regexp.MustCompile(`\]\(\s*(<[^>]*>|[^)\s]*)(?:\s+(?:"[^"]*"|'[^']*'|\([^)]*\)))?\s*\)`)
	// refDef matches a link reference definition: [label]: dest.
	refDef = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)`)
	// htmlHref matches a relative or absolute href of an HTML link.
	htmlHref = regexp.MustCompile(`<a\s[^>]*href="([^"]*)"`)
)

// links returns the link destinations of a Markdown document, outside
// fenced code blocks and code spans.
func links(doc []byte) []link {
	var out []link
	for _, l := range proseLines(doc) {
		text := stripCodeSpans(l.text)
		for _, re := range []*regexp.Regexp{inlineLink, refDef, htmlHref} {
			for _, m := range re.FindAllStringSubmatch(text, -1) {
				dest := strings.TrimSuffix(strings.TrimPrefix(m[1], "<"), ">")
				out = append(out, link{line: l.n, dest: dest})
			}
		}
	}
	return out
}

// line is one line of a document, numbered from 1.
type line struct {
	n    int
	text string
}

var fence = regexp.MustCompile("^ {0,3}(`{3,}|~{3,})")

// proseLines returns the lines of doc outside fenced code blocks.
func proseLines(doc []byte) []line {
	var out []line
	open := ""
	for i, text := range strings.Split(string(doc), "\n") {
		text = strings.TrimSuffix(text, "\r")
		if m := fence.FindStringSubmatch(text); m != nil {
			switch {
			case open == "":
				open = m[1]
				continue
			case m[1][0] == open[0] && len(m[1]) >= len(open) && strings.TrimSpace(text[strings.Index(text, m[1])+len(m[1]):]) == "":
				open = ""
				continue
			}
		}
		if open == "" {
			out = append(out, line{n: i + 1, text: text})
		}
	}
	return out
}

// stripCodeSpans removes the code spans of a line (text between two runs
// of as many backticks), keeping everything else; an unclosed run of
// backticks is kept as it is.
func stripCodeSpans(s string) string { return codeSpans(s, func(string) string { return "" }) }

// codeSpans replaces each code span of s by what repl makes of its
// content.
func codeSpans(s string, repl func(string) string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		if s[i] == '\\' && i+1 < len(s) {
			b.WriteString(s[i : i+2])
			i += 2
			continue
		}
		if s[i] != '`' {
			b.WriteByte(s[i])
			i++
			continue
		}
		j := i
		for j < len(s) && s[j] == '`' {
			j++
		}
		run := s[i:j]
		end := -1
		for k := j; k < len(s); {
			if s[k] != '`' {
				k++
				continue
			}
			m := k
			for m < len(s) && s[m] == '`' {
				m++
			}
			if m-k == len(run) {
				end = k
				break
			}
			k = m
		}
		if end < 0 {
			b.WriteString(run)
			i = j
			continue
		}
		content := s[j:end]
		if len(content) >= 2 && content[0] == ' ' && content[len(content)-1] == ' ' && strings.TrimSpace(content) != "" {
			content = content[1 : len(content)-1]
		}
		b.WriteString(repl(content))
		i = end + len(run)
	}
	return b.String()
}

// Heading is one heading of a document.
type Heading struct {
	Line   int
	Level  int
	Text   string // as written, inline Markdown included
	Anchor string // GitHub's anchor for it, duplicates numbered
}

var (
	atxHeading = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	setextLine = regexp.MustCompile(`^ {0,3}(=+|-+)[ \t]*$`)
	// notParagraph matches lines that a setext underline cannot turn into
	// a heading: blank, list items, quotes, tables, headings, HTML.
	notParagraph = regexp.MustCompile(`^\s*$|^ {0,3}([-*+]|\d+[.)])(\s|$)|^ {0,3}[>#|<]`)
)

// Headings returns the headings of a Markdown document (ATX and setext,
// outside fenced code blocks) with GitHub's anchors.
func Headings(doc []byte) []Heading {
	var out []Heading
	seen := map[string]int{}
	add := func(n, level int, text string) {
		out = append(out, Heading{Line: n, Level: level, Text: text, Anchor: uniqueSlug(Slug(text), seen)})
	}
	lines := proseLines(doc)
	for i, l := range lines {
		if m := atxHeading.FindStringSubmatch(l.text); m != nil {
			add(l.n, len(m[1]), m[2])
			continue
		}
		if m := setextLine.FindStringSubmatch(l.text); m != nil && i > 0 {
			prev := lines[i-1]
			if prev.n == l.n-1 && !notParagraph.MatchString(prev.text) && !setextLine.MatchString(prev.text) {
				level := 2
				if m[1][0] == '=' {
					level = 1
				}
				add(prev.n, level, strings.TrimSpace(prev.text))
			}
		}
	}
	slices.SortFunc(out, func(a, b Heading) int { return a.Line - b.Line })
	return out
}

// uniqueSlug numbers a slug already taken in seen, as github-slugger does:
// the second "x" becomes "x-1", the third "x-2".
func uniqueSlug(slug string, seen map[string]int) string {
	result := slug
	if _, ok := seen[slug]; ok {
		for {
			seen[slug]++
			result = fmt.Sprintf("%s-%d", slug, seen[slug])
			if _, taken := seen[result]; !taken {
				break
			}
		}
	}
	seen[result] = 0
	return result
}

var (
	mdLink    = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTag   = regexp.MustCompile(`<[^>]+>`)
	emphasis  = regexp.MustCompile(`\*+`)
	underline = regexp.MustCompile(`(^|[^\p{L}\p{N}])_+|_+([^\p{L}\p{N}]|$)`)
)

// Slug is GitHub's anchor for a heading written as text: the heading's
// rendered text (code spans, links and emphasis reduced to their text),
// lower-cased, each space a hyphen, and every character dropped but
// letters, marks, digits, hyphens and connector punctuation (the
// underscore).
func Slug(text string) string {
	// Code spans keep their text literally; protect it from the emphasis
	// rules with a private-use stand-in for each underscore and asterisk.
	text = codeSpans(text, func(c string) string {
		return strings.NewReplacer("_", "\uE000", "*", "").Replace(c)
	})
	text = mdLink.ReplaceAllString(text, "$1")
	text = htmlTag.ReplaceAllString(text, "")
	text = emphasis.ReplaceAllString(text, "")
	text = underline.ReplaceAllString(text, "$1$2")
	text = strings.ReplaceAll(text, "\uE000", "_")
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(text)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.Is(unicode.M, r) || unicode.Is(unicode.Pc, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

var htmlID = regexp.MustCompile(`<a\s[^>]*(?:name|id)="([^"]+)"`)

// htmlIDs returns the anchors a document sets with HTML (<a id="x">).
func htmlIDs(doc []byte) []string {
	var ids []string
	for _, l := range proseLines(doc) {
		for _, m := range htmlID.FindAllStringSubmatch(l.text, -1) {
			ids = append(ids, m[1])
		}
	}
	return ids
}

var tocEntry = regexp.MustCompile(`^(\s*)- \[(.+)\]\(#([^)\s]+)\)\s*$`)

// Contents checks the table of contents of a document: a list of links to
// its own headings, before its first section (## heading), that names
// every ## and ### heading once, in order, nested by level, and nothing
// else.
func Contents(name string, doc []byte) []Problem {
	heads := Headings(doc)
	firstSection := -1
	var want []Heading
	for _, h := range heads {
		if h.Level == 2 || h.Level == 3 {
			want = append(want, h)
			if firstSection < 0 {
				firstSection = h.Line
			}
		}
	}
	var problems []Problem
	bad := func(n int, format string, args ...any) {
		problems = append(problems, Problem{File: name, Line: n, Msg: fmt.Sprintf(format, args...)})
	}
	type entry struct {
		line, indent int
		anchor       string
	}
	var got []entry
	for _, l := range proseLines(doc) {
		if firstSection >= 0 && l.n >= firstSection {
			break
		}
		if m := tocEntry.FindStringSubmatch(l.text); m != nil {
			got = append(got, entry{line: l.n, indent: len(m[1]), anchor: m[3]})
		}
	}
	if len(got) == 0 {
		bad(1, "no table of contents (a list of links to the ## and ### headings before the first of them)")
		return problems
	}
	for i := 0; i < max(len(got), len(want)); i++ {
		switch {
		case i >= len(got):
			bad(want[i].Line, "heading %q (#%s) is not in the table of contents", want[i].Text, want[i].Anchor)
		case i >= len(want):
			bad(got[i].line, "contents entry #%s names no ## or ### heading after the last one listed", got[i].anchor)
		case got[i].anchor != want[i].Anchor:
			bad(got[i].line, "contents entry #%s: want #%s (%q), the next ## or ### heading", got[i].anchor, want[i].Anchor, want[i].Text)
			return problems // one shift misaligns every later entry
		case (got[i].indent > 0) != (want[i].Level == 3):
			bad(got[i].line, "contents entry #%s: a level-%d heading, want it %s", got[i].anchor, want[i].Level,
				map[bool]string{true: "indented under its section", false: "not indented"}[want[i].Level == 3])
		}
	}
	return problems
}

// License is the SPDX identifier every package manifest must name.
const License = "Apache-2.0"

// licenseMarkers are lines of the Apache License 2.0 that LICENSE must
// hold, in this order: its title, its version, its last section's end.
var licenseMarkers = []string{"Apache License", "Version 2.0, January 2004", "END OF TERMS AND CONDITIONS"}

// pyLicense reads pyproject.toml's license = "X" or license = {text = "X"}
// (the table form builds with setuptools before 77, as Debian 12's).
var pyLicense = regexp.MustCompile(`(?m)^license\s*=\s*(?:\{\s*text\s*=\s*)?"([^"]*)"\s*\}?\s*$`)

// Licenses checks the license of the repository at root: LICENSE holds the
// Apache License 2.0, every package manifest among files (package.json,
// pyproject.toml) names it, and a package that is published on its own
// (every manifest but a private one at the root) carries the same LICENSE
// file beside its manifest, since a package holds only its own directory.
func Licenses(root string, files []string) ([]Problem, error) {
	var problems []Problem
	bad := func(f, format string, args ...any) {
		problems = append(problems, Problem{File: f, Line: 1, Msg: fmt.Sprintf(format, args...)})
	}
	text, err := os.ReadFile(filepath.Join(root, "LICENSE"))
	if err != nil {
		bad("LICENSE", "no LICENSE file: %v", err)
		return problems, nil
	}
	rest := string(text)
	for _, m := range licenseMarkers {
		i := strings.Index(rest, m)
		if i < 0 {
			bad("LICENSE", "the Apache License 2.0 has the line %q; LICENSE lacks it (or has it out of order)", m)
			return problems, nil
		}
		rest = rest[i+len(m):]
	}
	for _, f := range files {
		var name string
		published := true
		switch path.Base(f) {
		case "package.json":
			b, err := os.ReadFile(filepath.Join(root, f))
			if err != nil {
				return nil, err
			}
			var m struct {
				License string
				Private bool
			}
			if err := json.Unmarshal(b, &m); err != nil {
				bad(f, "not JSON: %v", err)
				continue
			}
			name, published = m.License, !m.Private
		case "pyproject.toml":
			b, err := os.ReadFile(filepath.Join(root, f))
			if err != nil {
				return nil, err
			}
			if m := pyLicense.FindSubmatch(b); m != nil {
				name = string(m[1])
			}
		default:
			continue
		}
		if name != License {
			bad(f, "license %q, want %q as LICENSE", name, License)
		}
		if dir := path.Dir(f); published && dir != "." {
			own, err := os.ReadFile(filepath.Join(root, dir, "LICENSE"))
			if err != nil || !bytes.Equal(own, text) {
				bad(f, "a package published from %s/ must carry a copy of LICENSE there (cp LICENSE %s/)", dir, dir)
			}
		}
	}
	return problems, nil
}
