package locklogic

import (
	"testing"
	"unicode"
	"unicode/utf8"
)

// TestInvisibleASCII: the ASCII fast path of invisible agrees with the
// Unicode tables it skips.
func TestInvisibleASCII(t *testing.T) {
	for r := rune(0); r < utf8.RuneSelf; r++ {
		want := unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp)
		if invisible(r) != want {
			t.Errorf("%U: got %v, want %v", r, invisible(r), want)
		}
	}
}
