package locklogic

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// The fuzz targets of this file check the name rules against a plain
// statement of them: a name is 1–255 bytes of valid UTF-8 without control
// (Cc), formatting (Cf) or line/paragraph separator (Zl, Zp) characters. The
// seed corpus is in testdata/fuzz/<FuzzName>/.

// nameSeeds are inputs at the edges of the rules, for both targets.
var nameSeeds = []string{
	"payment:42",
	"w1",
	"",
	" ",
	"\t \n",
	" w1 ",
	strings.Repeat("a", 255),
	strings.Repeat("a", 256),
	strings.Repeat("é", 127) + "a",
	strings.Repeat("é", 128),
	"a/b",
	"a\x00b",
	"a\x7fb",
	"a\u0085b",
	"\u0085w1\u0085",
	"a\u200bb",
	"a\u202eb",
	"a\u2028b",
	"a\ufeffb",
	"\u00a0w1\u00a0",
	"a\xffb",
	"\xed\xa0\x80",
	"a\uFFFDb",
	"\U0001F512",
	"'; DROP TABLE locks; --",
	"#r = :o OR attribute_exists(#r)",
}

// wellFormed is the name rule stated directly.
func wellFormed(s string, maxBytes int) bool {
	if len(s) == 0 || len(s) > maxBytes || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.Is(unicode.Cc, r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp) {
			return false
		}
	}
	return true
}

// checkFieldErrors checks that every field error of v names field and says
// what is wrong.
func checkFieldErrors(tb testing.TB, v *ValidationError, field string) {
	tb.Helper()
	for _, fe := range v.Fields {
		if fe.Field != field || fe.Detail == "" {
			tb.Fatalf("got field error %+v, want field %q with a detail", fe, field)
		}
	}
}

// FuzzValidateResource: a resource is accepted exactly when it is a
// well-formed name without "/", and every rejection is a "resource" field
// error.
func FuzzValidateResource(f *testing.F) {
	for _, s := range nameSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, resource string) {
		var v ValidationError
		ValidateResource(resource, &v)
		want := wellFormed(resource, MaxResourceBytes) && !strings.Contains(resource, "/")
		if got := v.Err() == nil; got != want {
			t.Fatalf("ValidateResource(%q): got accepted %v (%v), want %v", resource, got, v.Err(), want)
		}
		checkFieldErrors(t, &v, "resource")
		if !want && len(v.Fields) == 0 {
			t.Fatalf("ValidateResource(%q): rejected without a field error", resource)
		}
	})
}

// FuzzNormalizeOwner: an owner is accepted exactly when it is valid UTF-8
// and, trimmed, a well-formed name; the value returned is the trimmed owner,
// which normalizes to itself; every rejection is an "owner" field error.
func FuzzNormalizeOwner(f *testing.F) {
	for _, s := range nameSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, owner string) {
		var v ValidationError
		got := NormalizeOwner(owner, &v)
		want := utf8.ValidString(owner) && wellFormed(strings.TrimSpace(owner), MaxOwnerBytes)
		if accepted := v.Err() == nil; accepted != want {
			t.Fatalf("NormalizeOwner(%q): got accepted %v (%v), want %v", owner, accepted, v.Err(), want)
		}
		checkFieldErrors(t, &v, "owner")
		if !want {
			if len(v.Fields) == 0 {
				t.Fatalf("NormalizeOwner(%q): rejected without a field error", owner)
			}
			return
		}
		if trimmed := strings.TrimSpace(owner); got != trimmed {
			t.Fatalf("NormalizeOwner(%q): got %q, want the trimmed owner %q", owner, got, trimmed)
		}
		var again ValidationError
		if twice := NormalizeOwner(got, &again); twice != got || again.Err() != nil {
			t.Fatalf("NormalizeOwner(%q) = %q, but normalizing that gives %q (%v)", owner, got, twice, again.Err())
		}
	})
}
