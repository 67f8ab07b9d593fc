package doccheck

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Block is a fenced code block of a Markdown document.
type Block struct {
	File string // relative to the root, slash-separated
	Line int    // of the opening fence
	Lang string // the info string: go, sh, console, text, …
	Body string
}

func (b Block) String() string { return fmt.Sprintf("%s:%d", b.File, b.Line) }

// exampleFence matches a fenced block that starts at the beginning of a line.
var exampleFence = regexp.MustCompile("(?ms)^```([^\n`]*)\n(.*?)^```[ \t]*$")

// Examples returns the fenced blocks of the documents whose examples the
// tests run as a reader would paste them: README.md, client/README.md and
// docs/*.md under root, in that order.
func Examples(root string) ([]Block, error) {
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	files = append([]string{filepath.Join(root, "README.md"), filepath.Join(root, "client", "README.md")}, files...)
	var out []Block
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		rel, _ := filepath.Rel(root, f)
		for _, m := range exampleFence.FindAllStringSubmatchIndex(string(data), -1) {
			out = append(out, Block{
				File: filepath.ToSlash(rel),
				Line: strings.Count(string(data[:m[0]]), "\n") + 1,
				Lang: strings.TrimSpace(string(data[m[2]:m[3]])),
				Body: string(data[m[4]:m[5]]),
			})
		}
	}
	return out, nil
}
