package api

import (
	"bytes"
	"encoding"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
)

// The event decoder of Invoker. aws-lambda-go decodes the event and encodes
// the answer with encoding/json's reflection: for the 2 KB API Gateway event,
// about 40 % of a bare DynamoDB call's CPU (make bench). decodeEvent reads
// the payload in one pass instead and keeps only the members the handlers
// read (storedPaths), checking every other member against its type in
// events.APIGatewayV2HTTPRequest, so that it accepts exactly the payloads
// encoding/json accepts. What it does not handle itself (an escaped or
// case-folded member name, a repeated member, a lone surrogate, invalid
// UTF-8, a fraction where an integer goes, a type error, deep nesting) goes
// to encoding/json, which then decides as it always did. TestInvoker and
// FuzzInvoke hold the two to the same results.

// storedPaths are the members of the event the handlers read, by JSON path,
// and what decodeEvent keeps: a handler that reads another member of the
// event must add it here (and to eventDecoder's setters).
var storedPaths = map[string]storedField{
	"routeKey":                                storeRouteKey,
	"rawPath":                                 storeRawPath,
	"body":                                    storeBody,
	"isBase64Encoded":                         storeBase64,
	"pathParameters":                          storePathParameters,
	"queryStringParameters":                   storeQueryParameters,
	"requestContext.requestId":                storeRequestID,
	"requestContext.timeEpoch":                storeTimeEpoch,
	"requestContext.authorizer":               storeAuthorizer,
	"requestContext.authorizer.iam":           storeIAM,
	"requestContext.authorizer.iam.userArn":   storeUserARN,
	"requestContext.authorizer.iam.userId":    storeUserID,
	"requestContext.authorizer.iam.callerId":  storeCallerID,
	"requestContext.authorizer.iam.accountId": storeAccountID,
}

// storedField is a member of the event decodeEvent keeps.
type storedField uint8

const (
	notStored storedField = iota
	storeRouteKey
	storeRawPath
	storeBody
	storeBase64
	storePathParameters
	storeQueryParameters
	storeRequestID
	storeTimeEpoch
	storeAuthorizer
	storeIAM
	storeUserARN
	storeUserID
	storeCallerID
	storeAccountID
	storedFields // the count
)

// storedKinds is the kind each stored member must have (the setters'
// types).
var storedKinds = [storedFields]fieldKind{
	storeRouteKey: kindString, storeRawPath: kindString, storeBody: kindString, storeBase64: kindBool,
	storePathParameters: kindStringMap, storeQueryParameters: kindStringMap,
	storeRequestID: kindString, storeTimeEpoch: kindInt64, storeAuthorizer: kindPointer, storeIAM: kindPointer,
	storeUserARN: kindString, storeUserID: kindString, storeCallerID: kindString, storeAccountID: kindString,
}

// fieldKind is what JSON encoding/json accepts for a member, by its Go type.
type fieldKind uint8

const (
	kindUnsupported fieldKind = iota // not checked here: the event goes to encoding/json
	kindString                       // a string or null
	kindBool                         // true, false or null
	kindInt64                        // an integer literal in range, or null
	kindStruct                       // an object or null
	kindPointer                      // a pointer to a struct: an object, or null (nil)
	kindStringMap                    // map[string]string: an object of strings and nulls, or null
	kindStringSlice                  // []string: an array of strings and nulls, or null
	kindAnyMap                       // map[string]any: an object, or null
	kindAny                          // any: any value
)

// eventObject is the members encoding/json matches in one JSON object of
// the event: a struct's exported fields, by JSON name.
type eventObject struct {
	fields []eventField
}

// eventField is one member of an eventObject.
type eventField struct {
	name  string
	kind  fieldKind
	sub   *eventObject // kindStruct, kindPointer
	store storedField
}

// eventSchema is events.APIGatewayV2HTTPRequest as decodeEvent reads it;
// nil (every event through encoding/json) if the type has something it does
// not know, or lacks a member of storedPaths (TestEventSchema).
var eventSchema = func() *eventObject {
	found := map[string]bool{}
	o := buildObject(reflect.TypeFor[events.APIGatewayV2HTTPRequest](), "", found)
	if o == nil || len(found) != len(storedPaths) {
		return nil
	}
	return o
}()

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// buildObject returns the members of struct type t, whose JSON path is
// path, recording the stored ones in found; nil for a struct encoding/json
// reads in ways decodeEvent does not (embedded fields, a ",string" option,
// more members than a 64-bit set counts).
func buildObject(t reflect.Type, path string, found map[string]bool) *eventObject {
	o := &eventObject{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous || strings.Contains(","+opts+",", ",string,") {
			return nil
		}
		if name == "" {
			name = f.Name
		}
		p := name
		if path != "" {
			p = path + "." + name
		}
		ef := eventField{name: name, kind: kindOf(f.Type), store: storedPaths[p]}
		switch ef.kind {
		case kindStruct:
			ef.sub = buildObject(f.Type, p, found)
		case kindPointer:
			ef.sub = buildObject(f.Type.Elem(), p, found)
		}
		if (ef.kind == kindStruct || ef.kind == kindPointer) && ef.sub == nil {
			return nil
		}
		if ef.store != notStored {
			if storedKinds[ef.store] != ef.kind {
				return nil
			}
			found[p] = true
		}
		o.fields = append(o.fields, ef)
	}
	if len(o.fields) > 64 {
		return nil
	}
	return o
}

// kindOf says how encoding/json reads a value of type t.
func kindOf(t reflect.Type) fieldKind {
	if t.Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(jsonUnmarshaler) ||
		t.Implements(textUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
		return kindUnsupported
	}
	switch {
	case t.Kind() == reflect.String:
		return kindString
	case t.Kind() == reflect.Bool:
		return kindBool
	case t.Kind() == reflect.Int64:
		return kindInt64
	case t.Kind() == reflect.Struct:
		return kindStruct
	case t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct:
		return kindPointer
	case t.Kind() == reflect.Interface && t.NumMethod() == 0:
		return kindAny
	case t.Kind() == reflect.Slice && kindOf(t.Elem()) == kindString:
		return kindStringSlice
	case t.Kind() == reflect.Map && t.Key().Kind() == reflect.String && kindOf(t.Key()) == kindString:
		switch kindOf(t.Elem()) {
		case kindString:
			return kindStringMap
		case kindAny:
			return kindAnyMap
		}
	}
	return kindUnsupported
}

// decodeEvent decodes payload into ev, a zero event, as aws-lambda-go does
// (a json.Decoder's Decode: what follows the first value is not read), with
// the members of storedPaths only, or through encoding/json, all members.
// Either way it returns encoding/json's error, if any.
func decodeEvent(payload []byte, ev *events.APIGatewayV2HTTPRequest) error {
	if eventSchema != nil {
		d := eventDecoder{b: payload, ev: ev}
		if d.space(); d.peek() == '{' && d.object(eventSchema, 0) {
			return nil
		}
		*ev = events.APIGatewayV2HTTPRequest{}
	}
	return json.NewDecoder(bytes.NewReader(payload)).Decode(ev)
}

// maxDepth bounds the nesting decodeEvent follows; deeper goes to
// encoding/json (which allows 10,000).
const maxDepth = 64

// eventDecoder reads one payload. Each method reads one JSON element at
// b[i:] and reports false for anything it leaves to encoding/json.
type eventDecoder struct {
	b  []byte
	i  int
	ev *events.APIGatewayV2HTTPRequest
	// s is b as a string, made on the first string kept: the strings kept
	// without escapes are slices of it, one allocation for them all.
	s string
}

func (d *eventDecoder) space() {
	b, i := d.b, d.i
	for i < len(b) && byteClass[b[i]]&isSpace != 0 {
		i++
	}
	d.i = i
}

// byteClass sorts the bytes of a payload for the decoder's loops.
var byteClass = func() (t [256]uint8) {
	for c := range 256 {
		if c >= 0x20 && c != '"' && c != '\\' {
			t[c] |= isPlain
			if c < utf8.RuneSelf {
				t[c] |= isKey
			}
		}
	}
	for _, c := range " \t\n\r" {
		t[c] |= isSpace
	}
	return t
}()

const (
	isSpace = 1 << iota // JSON white space
	isPlain             // stands for itself in a string: not '"', '\\' or a control character
	isKey               // plain and ASCII: a member name decodeEvent matches itself
)

// peek returns the next byte, or 0 at the end.
func (d *eventDecoder) peek() byte {
	if d.i < len(d.b) {
		return d.b[d.i]
	}
	return 0
}

// literal consumes lit if it comes next.
func (d *eventDecoder) literal(lit string) bool {
	if len(d.b)-d.i >= len(lit) && string(d.b[d.i:d.i+len(lit)]) == lit {
		d.i += len(lit)
		return true
	}
	return false
}

// object reads the object of o at b[i] == '{', its members into d.ev.
func (d *eventDecoder) object(o *eventObject, depth int) bool {
	if depth >= maxDepth {
		return false
	}
	d.i++
	d.space()
	if d.peek() == '}' {
		d.i++
		return true
	}
	var seen uint64
	for {
		key, ok := d.plainKey()
		if !ok {
			return false
		}
		if d.space(); !d.literal(":") {
			return false
		}
		d.space()
		f := o.field(key)
		switch {
		case f >= 0:
			if seen&(1<<f) != 0 {
				return false // encoding/json would merge the two
			}
			seen |= 1 << f
			if !d.member(&o.fields[f], depth) {
				return false
			}
		case o.folds(key):
			return false // encoding/json matches names case-insensitively
		default:
			if !d.skip(depth+1, false) {
				return false
			}
		}
		d.space()
		switch d.peek() {
		case ',':
			d.i++
			d.space()
		case '}':
			d.i++
			return true
		default:
			return false
		}
	}
}

// field returns the index of the member named key, or -1.
func (o *eventObject) field(key []byte) int {
	for i := range o.fields {
		if o.fields[i].name == string(key) {
			return i
		}
	}
	return -1
}

// folds reports whether the ASCII key equals a member's name but for case.
func (o *eventObject) folds(key []byte) bool {
	for i := range o.fields {
		if n := o.fields[i].name; len(n) == len(key) {
			j := 0
			for j < len(n) && lower(n[j]) == lower(key[j]) {
				j++
			}
			if j == len(n) {
				return true
			}
		}
	}
	return false
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// plainKey reads a member name of printable ASCII without escapes (others
// may match a field by encoding/json's Unicode case folding).
func (d *eventDecoder) plainKey() ([]byte, bool) {
	b, i := d.b, d.i+1
	if d.peek() != '"' {
		return nil, false
	}
	for i < len(b) && byteClass[b[i]]&isKey != 0 {
		i++
	}
	if i >= len(b) || b[i] != '"' {
		return nil, false
	}
	key := b[d.i+1 : i]
	d.i = i + 1
	return key, true
}

// member reads the value of f.
func (d *eventDecoder) member(f *eventField, depth int) bool {
	null := d.literal("null")
	switch f.kind {
	case kindString:
		if null {
			return true
		}
		if f.store == notStored {
			return d.peek() == '"' && d.skipString()
		}
		s, ok := d.str()
		if ok {
			d.setString(f.store, s)
		}
		return ok
	case kindBool:
		v := d.literal("true")
		if !null && !v && !d.literal("false") {
			return false
		}
		if !null && f.store == storeBase64 {
			d.ev.IsBase64Encoded = v
		}
		return true
	case kindInt64:
		if null {
			return true
		}
		n, ok := d.integer()
		if ok && f.store == storeTimeEpoch {
			d.ev.RequestContext.TimeEpoch = n
		}
		return ok
	case kindStruct, kindPointer:
		if null {
			d.setPointer(f.store, false)
			return true
		}
		if d.peek() != '{' {
			return false
		}
		d.setPointer(f.store, true)
		return d.object(f.sub, depth+1)
	case kindStringMap:
		m := d.stringMap(f.store)
		if null {
			if m != nil {
				*m = nil
			}
			return true
		}
		return d.peek() == '{' && d.readStringMap(m, depth+1)
	case kindStringSlice:
		return null || d.peek() == '[' && d.stringSlice(depth+1)
	case kindAnyMap:
		return null || d.peek() == '{' && d.skip(depth+1, true)
	case kindAny:
		return null || d.skip(depth+1, true)
	}
	return false
}

func (d *eventDecoder) setString(f storedField, s string) {
	ev := d.ev
	switch f {
	case storeRouteKey:
		ev.RouteKey = s
	case storeRawPath:
		ev.RawPath = s
	case storeBody:
		ev.Body = s
	case storeRequestID:
		ev.RequestContext.RequestID = s
	case storeUserARN:
		ev.RequestContext.Authorizer.IAM.UserARN = s
	case storeUserID:
		ev.RequestContext.Authorizer.IAM.UserID = s
	case storeCallerID:
		ev.RequestContext.Authorizer.IAM.CallerID = s
	case storeAccountID:
		ev.RequestContext.Authorizer.IAM.AccountID = s
	}
}

// setPointer sets the stored pointer f to a new struct, or to nil. (A
// stored pointer's parent is stored too, so it is set when f is read.)
func (d *eventDecoder) setPointer(f storedField, object bool) {
	rc := &d.ev.RequestContext
	switch f {
	case storeAuthorizer:
		rc.Authorizer = nil
		if object {
			rc.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{}
		}
	case storeIAM:
		rc.Authorizer.IAM = nil
		if object {
			rc.Authorizer.IAM = &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{}
		}
	}
}

// stringMap returns the stored map f, or nil.
func (d *eventDecoder) stringMap(f storedField) *map[string]string {
	switch f {
	case storePathParameters:
		return &d.ev.PathParameters
	case storeQueryParameters:
		return &d.ev.QueryStringParameters
	}
	return nil
}

// readStringMap reads an object of strings and nulls (the empty string)
// into a new *m, or only checks it when m is nil.
func (d *eventDecoder) readStringMap(m *map[string]string, depth int) bool {
	if depth >= maxDepth {
		return false
	}
	if m != nil {
		*m = make(map[string]string, 2)
	}
	d.i++
	d.space()
	if d.peek() == '}' {
		d.i++
		return true
	}
	for {
		if d.peek() != '"' {
			return false
		}
		var k string
		if m != nil {
			var ok bool
			if k, ok = d.str(); !ok {
				return false
			}
		} else if !d.skipString() {
			return false
		}
		if d.space(); !d.literal(":") {
			return false
		}
		d.space()
		var v string
		switch {
		case d.literal("null"):
		case d.peek() != '"':
			return false
		case m == nil:
			if !d.skipString() {
				return false
			}
		default:
			var ok bool
			if v, ok = d.str(); !ok {
				return false
			}
		}
		if m != nil {
			(*m)[k] = v
		}
		d.space()
		switch d.peek() {
		case ',':
			d.i++
			d.space()
		case '}':
			d.i++
			return true
		default:
			return false
		}
	}
}

// stringSlice checks an array of strings and nulls.
func (d *eventDecoder) stringSlice(depth int) bool {
	if depth >= maxDepth {
		return false
	}
	d.i++
	d.space()
	if d.peek() == ']' {
		d.i++
		return true
	}
	for {
		if !d.literal("null") && !(d.peek() == '"' && d.skipString()) {
			return false
		}
		d.space()
		switch d.peek() {
		case ',':
			d.i++
			d.space()
		case ']':
			d.i++
			return true
		default:
			return false
		}
	}
}

// str reads a string as encoding/json unquotes it; false for invalid UTF-8
// and lone surrogates, which encoding/json turns into U+FFFD.
func (d *eventDecoder) str() (string, bool) {
	if d.peek() != '"' {
		return "", false
	}
	b, start := d.b, d.i+1
	i := start
	for i < len(b) && byteClass[b[i]]&isPlain != 0 {
		i++
	}
	switch {
	case i >= len(b) || b[i] < 0x20:
		return "", false
	case b[i] == '\\':
		return d.escaped(start, i)
	case !utf8.Valid(b[start:i]):
		return "", false
	}
	if d.s == "" {
		d.s = string(b)
	}
	d.i = i + 1
	return d.s[start:i], true
}

// escaped finishes str for a string starting at b[start] whose first
// escape is at b[i].
func (d *eventDecoder) escaped(start, i int) (string, bool) {
	// The string's length bounds its decoded length.
	if !d.skipFrom(i) {
		return "", false
	}
	out := make([]byte, 0, d.i-start)
	out = append(out, d.b[start:i]...)
	plain := i // the start of the bytes not yet copied
	for i < len(d.b) {
		c := d.b[i]
		switch {
		case c == '"':
			out = append(out, d.b[plain:i]...)
			if !utf8.Valid(out) {
				return "", false
			}
			d.i = i + 1
			return string(out), true
		case c < 0x20:
			return "", false
		case c != '\\':
			i++
			continue
		}
		out = append(out, d.b[plain:i]...)
		if i+1 >= len(d.b) {
			return "", false
		}
		switch e := d.b[i+1]; e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(d.b, i+2)
			if !ok {
				return "", false
			}
			i += 4
			if 0xD800 <= r && r < 0xE000 {
				lo, ok := rune(0), false
				if r < 0xDC00 && i+7 < len(d.b) && d.b[i+2] == '\\' && d.b[i+3] == 'u' {
					lo, ok = hex4(d.b, i+4)
				}
				if !ok || lo < 0xDC00 || lo >= 0xE000 {
					return "", false // a lone surrogate
				}
				r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
				i += 6
			}
			out = utf8.AppendRune(out, r)
		default:
			return "", false
		}
		i += 2
		plain = i
	}
	return "", false
}

// skipString checks a string at b[i] == '"' and moves past it.
func (d *eventDecoder) skipString() bool { return d.skipFrom(d.i + 1) }

// skipFrom is skipString from b[i], inside the string.
func (d *eventDecoder) skipFrom(i int) bool {
	b := d.b
	for {
		for i < len(b) && byteClass[b[i]]&isPlain != 0 {
			i++
		}
		switch {
		case i >= len(b) || b[i] < 0x20:
			return false
		case b[i] == '"':
			d.i = i + 1
			return true
		}
		// An escape.
		if i+1 >= len(b) {
			return false
		}
		switch b[i+1] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			i += 2
		case 'u':
			if _, ok := hex4(b, i+2); !ok {
				return false
			}
			i += 6
		default:
			return false
		}
	}
}

// integer reads an integer literal that fits an int64; false for a
// fraction or exponent (encoding/json's type error).
func (d *eventDecoder) integer() (int64, bool) {
	neg := d.literal("-")
	start := d.i
	var n uint64
	for d.i < len(d.b) && '0' <= d.b[d.i] && d.b[d.i] <= '9' {
		if n > (1<<63)/10 {
			return 0, false
		}
		n = n*10 + uint64(d.b[d.i]-'0')
		d.i++
	}
	switch digits := d.i - start; {
	case digits == 0, digits > 1 && d.b[start] == '0':
		return 0, false
	case d.i < len(d.b) && (d.b[d.i] == '.' || d.b[d.i] == 'e' || d.b[d.i] == 'E'):
		return 0, false
	case neg && n <= 1<<63:
		return -int64(n), true
	case !neg && n < 1<<63:
		return int64(n), true
	}
	return 0, false
}

// skip checks any JSON value and moves past it. In a value decoded into
// an interface (asAny) a number must also fit a float64.
func (d *eventDecoder) skip(depth int, asAny bool) bool {
	if depth >= maxDepth {
		return false
	}
	switch c := d.peek(); {
	case c == '"':
		return d.skipString()
	case c == '{' || c == '[':
		end := byte('}')
		if c == '[' {
			end = ']'
		}
		d.i++
		d.space()
		if d.peek() == end {
			d.i++
			return true
		}
		for {
			if c == '{' {
				if d.peek() != '"' || !d.skipString() {
					return false
				}
				if d.space(); !d.literal(":") {
					return false
				}
				d.space()
			}
			if !d.skip(depth+1, asAny) {
				return false
			}
			d.space()
			switch d.peek() {
			case ',':
				d.i++
				d.space()
			case end:
				d.i++
				return true
			default:
				return false
			}
		}
	case c == '-' || '0' <= c && c <= '9':
		start := d.i
		if !d.skipNumber() {
			return false
		}
		if asAny {
			_, err := strconv.ParseFloat(string(d.b[start:d.i]), 64)
			return err == nil
		}
		return true
	}
	return d.literal("true") || d.literal("false") || d.literal("null")
}

// skipNumber checks a number, -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?,
// and moves past it.
func (d *eventDecoder) skipNumber() bool {
	d.literal("-")
	switch c := d.peek(); {
	case c == '0':
		d.i++
	case '1' <= c && c <= '9':
		d.digits()
	default:
		return false
	}
	if d.literal(".") && !d.digits() {
		return false
	}
	if c := d.peek(); c == 'e' || c == 'E' {
		d.i++
		if c := d.peek(); c == '+' || c == '-' {
			d.i++
		}
		return d.digits()
	}
	return true
}

// digits moves past one or more digits.
func (d *eventDecoder) digits() bool {
	start := d.i
	for d.i < len(d.b) && '0' <= d.b[d.i] && d.b[d.i] <= '9' {
		d.i++
	}
	return d.i > start
}
