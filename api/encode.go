package api

import (
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/ft288/locks/locklogic"
)

// The answers of the lock routes are written by hand rather than through
// encoding/json's reflection: they are on every request's path (make bench
// weighs the handler against a bare DynamoDB call). The bytes are exactly
// encoding/json's (TestResponseEncoding).

// jsonAppender is a response body that writes its own JSON.
type jsonAppender interface {
	appendJSON(b []byte) []byte
}

var (
	_ jsonAppender = AcquireResponse{}
	_ jsonAppender = RenewResponse{}
	_ jsonAppender = LockJSON{}
	_ jsonAppender = lockBody{}
	_ jsonAppender = acquiredBody{}
	_ jsonAppender = renewedBody{}
)

// lockBody is a lease as status answers it: LockJSON, written straight
// from the service's Lock (its times formatted into the answer).
type lockBody locklogic.Lock

// acquiredBody is a granted acquire's answer: AcquireResponse with the lock.
type acquiredBody locklogic.Lock

// renewedBody is a renewal's answer: RenewResponse.
type renewedBody locklogic.Lock

func (l lockBody) appendJSON(b []byte) []byte {
	b = append(b, `{"resource":`...)
	b = appendJSONString(b, l.Resource)
	b = append(b, `,"owner":`...)
	b = appendJSONString(b, l.Owner)
	b = append(b, `,"fencing_token":`...)
	b = strconv.AppendInt(b, l.FencingToken, 10)
	// TimeFormat writes only digits and "-:.TZ": nothing to escape.
	b = append(b, `,"acquired_at":"`...)
	b = appendTime(b, l.AcquiredAt)
	b = append(b, `","expires_at":"`...)
	b = appendTime(b, l.ExpiresAt)
	if secs := int64(l.LockDelay / time.Second); secs > 0 {
		b = append(b, `","lock_delay_seconds":`...)
		b = strconv.AppendInt(b, secs, 10)
		return append(b, '}')
	}
	return append(b, `"}`...)
}

// appendTime appends t in UTC as t.UTC().Format(TimeFormat) does, without
// parsing the layout on every call.
func appendTime(b []byte, t time.Time) []byte {
	t = t.UTC()
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		return t.AppendFormat(b, TimeFormat)
	}
	hour, minute, sec := t.Clock()
	b = appendDigits(b, year, 4)
	b = append(b, '-')
	b = appendDigits(b, int(month), 2)
	b = append(b, '-')
	b = appendDigits(b, day, 2)
	b = append(b, 'T')
	b = appendDigits(b, hour, 2)
	b = append(b, ':')
	b = appendDigits(b, minute, 2)
	b = append(b, ':')
	b = appendDigits(b, sec, 2)
	b = append(b, '.')
	b = appendDigits(b, t.Nanosecond()/int(time.Millisecond), 3)
	return append(b, 'Z')
}

// appendDigits appends the n lowest decimal digits of v ≥ 0.
func appendDigits(b []byte, v, n int) []byte {
	for i := n - 1; i >= 0; i-- {
		b = append(b, 0)
	}
	for i := len(b) - 1; n > 0; i, n = i-1, n-1 {
		b[i] = byte('0' + v%10)
		v /= 10
	}
	return b
}

func (l acquiredBody) appendJSON(b []byte) []byte {
	b = append(b, `{"acquired":true,"lock":`...)
	b = lockBody(l).appendJSON(b)
	return append(b, '}')
}

func (l renewedBody) appendJSON(b []byte) []byte {
	b = append(b, `{"renewed":true,"lock":`...)
	b = lockBody(l).appendJSON(b)
	return append(b, '}')
}

func (l LockJSON) appendJSON(b []byte) []byte {
	b = append(b, `{"resource":`...)
	b = appendJSONString(b, l.Resource)
	b = append(b, `,"owner":`...)
	b = appendJSONString(b, l.Owner)
	b = append(b, `,"fencing_token":`...)
	b = strconv.AppendInt(b, l.FencingToken, 10)
	b = append(b, `,"acquired_at":`...)
	b = appendJSONString(b, l.AcquiredAt)
	b = append(b, `,"expires_at":`...)
	b = appendJSONString(b, l.ExpiresAt)
	if l.LockDelaySeconds != 0 {
		b = append(b, `,"lock_delay_seconds":`...)
		b = strconv.AppendInt(b, l.LockDelaySeconds, 10)
	}
	return append(b, '}')
}

func (r AcquireResponse) appendJSON(b []byte) []byte {
	b = append(b, `{"acquired":`...)
	b = strconv.AppendBool(b, r.Acquired)
	if r.Lock != nil {
		b = append(b, `,"lock":`...)
		b = r.Lock.appendJSON(b)
	}
	if r.Resource != "" {
		b = append(b, `,"resource":`...)
		b = appendJSONString(b, r.Resource)
	}
	if r.ExpiresAt != "" {
		b = append(b, `,"expires_at":`...)
		b = appendJSONString(b, r.ExpiresAt)
	}
	if r.QueueTicket != "" {
		b = append(b, `,"queue_ticket":`...)
		b = appendJSONString(b, r.QueueTicket)
	}
	return append(b, '}')
}

func (r RenewResponse) appendJSON(b []byte) []byte {
	b = append(b, `{"renewed":`...)
	b = strconv.AppendBool(b, r.Renewed)
	b = append(b, `,"lock":`...)
	b = r.Lock.appendJSON(b)
	return append(b, '}')
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string the way encoding/json writes
// it: HTML-safe (<, > and & escaped), U+2028 and U+2029 escaped, invalid
// UTF-8 as U+FFFD.
func appendJSONString(b []byte, s string) []byte { return appendString(b, s, &htmlSafe) }

// appendString appends s as a JSON string the way encoding/json writes it
// with the ASCII characters safe left as they are: htmlSafe for Marshal,
// jsonSafe for an Encoder with SetEscapeHTML(false), as aws-lambda-go
// writes a response (appendResponse).
func appendString(b []byte, s string, safe *[utf8.RuneSelf]bool) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if safe[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// jsonSafe and htmlSafe say which ASCII characters a JSON string holds as
// they are, without and with HTML escaping (encoding/json's safeSet and
// htmlSafeSet).
var jsonSafe, htmlSafe = func() (js, hs [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		js[c] = c != '"' && c != '\\'
		hs[c] = js[c] && c != '<' && c != '>' && c != '&'
	}
	return js, hs
}()
