package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ft288/locks/locklogic"
)

// MaxBodyBytes is the largest request body accepted (16 KiB); anything
// larger is answered 413 before it is parsed.
const MaxBodyBytes = 16 << 10

// bodyError is a request body that cannot be read as a JSON object.
type bodyError struct {
	status int // 400 or 413
	detail string
}

func (e *bodyError) Error() string { return e.detail }

// body holds the members of a request's JSON object, raw, for typed access
// that can tell "3600" from 3600 and 60.0 from 60 (seed ATK-08).
type body struct {
	members map[string]json.RawMessage
	errs    locklogic.ValidationError
}

// Examples of each route's body, for the hint of an answer to an empty one.
const (
	exampleLease     = `{"owner": "worker-1", "ttl_seconds": 30}`
	exampleLeaseWait = `{"owner": "worker-1", "ttl_seconds": 30, "wait_seconds": 10}`
	exampleRelease   = `{"owner": "worker-1"}`
)

// pickExample returns the example body of a waiting route (waits) or of
// its try route: each route's hint must be a body that route accepts.
func pickExample(waits bool, try, wait string) string {
	if waits {
		return wait
	}
	return try
}

// parseBody reads req's body as one JSON object whose member names are all
// in allowed. Size and syntax problems are *bodyError (an empty body's hint
// shows example, the route's body); unknown or duplicate members are
// recorded as validation errors in the returned body.
func parseBody(req *events.APIGatewayV2HTTPRequest, example string, allowed ...string) (*body, error) {
	raw := []byte(req.Body)
	if req.IsBase64Encoded {
		dec, err := base64.StdEncoding.DecodeString(req.Body)
		if err != nil {
			return nil, &bodyError{400, "The request body is not valid base64."}
		}
		raw = dec
	}
	if len(raw) > MaxBodyBytes {
		return nil, &bodyError{413, "The request body is larger than " + strconv.Itoa(MaxBodyBytes) + " bytes."}
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, &bodyError{400, "The request body must be a JSON object, e.g. " + example + "."}
	}
	if !utf8.Valid(raw) {
		return nil, &bodyError{400, "The request body is not valid UTF-8."}
	}
	if !json.Valid(raw) {
		return nil, syntaxError(raw)
	}
	// raw is one valid JSON value: its top level can be split by a plain
	// scan, without a decoder's allocations.
	i := skipSpace(raw, 0)
	if raw[i] != '{' {
		return nil, &bodyError{400, "The request body must be a JSON object."}
	}
	b := &body{members: make(map[string]json.RawMessage, len(allowed))}
	for i = skipSpace(raw, i+1); raw[i] != '}'; i = skipSpace(raw, i) {
		if raw[i] == ',' {
			i = skipSpace(raw, i+1)
		}
		end := endOfString(raw, i)
		name := memberName(raw[i:end], allowed)
		start := skipSpace(raw, skipSpace(raw, end)+1) // past the ':'
		i = endOfValue(raw, start)
		switch _, dup := b.members[name]; {
		case dup:
			b.errs.Add(name, "appears more than once")
		case !contains(allowed, name):
			b.errs.Add(name, "is not a known member; allowed: "+strings.Join(allowed, ", "))
		}
		b.members[name] = raw[start:i]
	}
	return b, nil
}

// syntaxError says what is wrong with raw, which is not one JSON value.
func syntaxError(raw []byte) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return &bodyError{400, "The request body is not valid JSON."}
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return &bodyError{400, "The request body must be a JSON object."}
	}
	var value json.RawMessage
	for dec.More() {
		if _, err := dec.Token(); err != nil {
			return &bodyError{400, "The request body is not valid JSON."}
		}
		if err := dec.Decode(&value); err != nil {
			return &bodyError{400, "The request body is not valid JSON."}
		}
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return &bodyError{400, "The request body is not valid JSON."}
	}
	return &bodyError{400, "The request body must hold exactly one JSON object."}
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON white space.
func skipSpace(raw []byte, i int) int {
	for i < len(raw) && (raw[i] == ' ' || raw[i] == '\t' || raw[i] == '\n' || raw[i] == '\r') {
		i++
	}
	return i
}

// endOfString returns the index just past the valid JSON string that
// starts at raw[i].
func endOfString(raw []byte, i int) int {
	for i++; raw[i] != '"'; i++ {
		if raw[i] == '\\' {
			i++
		}
	}
	return i + 1
}

// endOfValue returns the index just past the valid JSON value that starts
// at raw[i].
func endOfValue(raw []byte, i int) int {
	switch raw[i] {
	case '"':
		return endOfString(raw, i)
	case '{', '[':
		depth := 0
		for ; ; i++ {
			switch raw[i] {
			case '"':
				i = endOfString(raw, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
	}
	for i < len(raw) && !bytes.ContainsRune([]byte(",}] \t\n\r"), rune(raw[i])) {
		i++
	}
	return i
}

// memberName returns the member name whose valid JSON string literal is
// raw: the allowed name itself when it is one (no copy), else unquoted.
func memberName(raw []byte, allowed []string) string {
	for _, a := range allowed {
		if len(raw) == len(a)+2 && string(raw[1:len(raw)-1]) == a {
			return a
		}
	}
	return unquote(raw)
}

// unquote returns the valid JSON string literal raw as Go reads it.
func unquote(raw []byte) string {
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1])
	}
	var s string
	_ = json.Unmarshal(raw, &s)
	return s
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// str returns the required string member name. A lone UTF-16 surrogate
// escape, which encoding/json silently turns into U+FFFD, is rejected.
func (b *body) str(name string) string {
	raw, ok := b.members[name]
	if !ok {
		b.errs.Add(name, "is required")
		return ""
	}
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		b.errs.Add(name, "must be a JSON string")
		return ""
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1]) // no escapes: the bytes are the string
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		b.errs.Add(name, "must be a JSON string")
		return ""
	}
	if loneSurrogate(raw) {
		b.errs.Add(name, "must be valid UTF-8 (no lone surrogate escapes)")
		return ""
	}
	return s
}

// loneSurrogate reports whether the JSON string literal raw has a \uXXXX
// escape of a UTF-16 surrogate that is not part of a high+low pair, which
// encoding/json would silently turn into U+FFFD.
func loneSurrogate(raw []byte) bool {
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' || i+1 >= len(raw) {
			continue
		}
		if raw[i+1] != 'u' {
			i++ // an escaped character such as \\ or \"
			continue
		}
		r, ok := hex4(raw, i+2)
		if !ok {
			continue
		}
		i += 5
		switch {
		case r >= 0xDC00 && r <= 0xDFFF:
			return true // a low surrogate without a high one
		case r >= 0xD800 && r <= 0xDBFF:
			if i+6 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u' {
				if lo, ok := hex4(raw, i+3); ok && lo >= 0xDC00 && lo <= 0xDFFF {
					i += 6
					continue
				}
			}
			return true // a high surrogate without a low one
		}
	}
	return false
}

// hex4 parses the four hex digits at raw[at:].
func hex4(raw []byte, at int) (rune, bool) {
	if at+4 > len(raw) {
		return 0, false
	}
	var r rune
	for _, c := range raw[at : at+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// integerLiteral reports whether raw is a JSON number written without
// fraction or exponent: -?(0|[1-9][0-9]*).
func integerLiteral(raw []byte) bool {
	if len(raw) > 0 && raw[0] == '-' {
		raw = raw[1:]
	}
	switch {
	case len(raw) == 0:
		return false
	case raw[0] == '0':
		return len(raw) == 1
	}
	for _, c := range raw {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// optStr returns the optional string member name: "" when absent or
// null. Its content is the caller's to check, but for the empty string:
// present, it must not be empty.
func (b *body) optStr(name string) string {
	if raw, ok := b.members[name]; !ok || string(raw) == "null" {
		return ""
	}
	s := b.str(name)
	if s == "" && !b.errs.Has(name) {
		b.errs.Add(name, "must not be empty (leave it out, or null, for none)")
	}
	return s
}

// bool returns the optional boolean member name: false when absent or
// null.
func (b *body) bool(name string) bool {
	raw, ok := b.members[name]
	switch {
	case !ok || string(raw) == "null" || string(raw) == "false":
		return false
	case string(raw) == "true":
		return true
	}
	b.errs.Add(name, "must be a JSON boolean (true or false)")
	return false
}

// int returns the integer member name. Only a JSON integer literal counts:
// "3600", 60.5, 60.0, 1e3, true and null are all rejected. Optional members
// that are absent or null return nil.
func (b *body) int(name string, required bool) *int64 {
	raw, ok := b.members[name]
	if !ok || (!required && string(raw) == "null") {
		if required {
			b.errs.Add(name, "is required")
		}
		return nil
	}
	if !integerLiteral(raw) {
		b.errs.Add(name, "must be a JSON integer (not a string, fraction, exponent, boolean or null)")
		return nil
	}
	i, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		b.errs.Add(name, "is out of range")
		return nil
	}
	return &i
}
