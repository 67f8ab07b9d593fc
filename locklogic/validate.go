package locklogic

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits on inputs. Resource and owner are bounded so a hostile client cannot
// grow items or keys (seed ATK-12); DynamoDB allows 2,048-byte partition keys.
const (
	MaxResourceBytes = 255
	MaxOwnerBytes    = 255
	// DefaultMaxTTLSeconds is the longest lease a caller may ask for unless
	// the service is configured otherwise.
	DefaultMaxTTLSeconds = 86400
	// DefaultMaxLockDelaySeconds is the longest lock-delay a caller may ask
	// for unless the service is configured otherwise (5 minutes).
	DefaultMaxLockDelaySeconds = 300
	// MaxLockDelayLimit bounds Config.MaxLockDelaySeconds: one day. A
	// longer delay would keep a lock from everyone for longer than any
	// holder that died can need.
	MaxLockDelayLimit = 86400
	// MaxReasonBytes bounds a force release's reason.
	MaxReasonBytes = 500
)

// ValidateResource checks a resource name taken from the (decoded) URL path:
// 1–255 bytes of valid UTF-8 with no control characters and no "/".
func ValidateResource(resource string, v *ValidationError) {
	if detail := checkName(resource, MaxResourceBytes); detail != "" {
		v.Add("resource", detail)
		return
	}
	if strings.Contains(resource, "/") {
		v.Add("resource", `must not contain "/"`)
	}
}

// NormalizeOwner trims white space around owner and checks the rest: 1–255
// bytes of valid UTF-8 with no control characters (seed ATK-07: " " is not
// an owner). It returns the trimmed owner, which is what gets stored.
func NormalizeOwner(owner string, v *ValidationError) string {
	if !utf8.ValidString(owner) {
		v.Add("owner", "must be valid UTF-8")
		return ""
	}
	owner = strings.TrimSpace(owner)
	if detail := checkName(owner, MaxOwnerBytes); detail != "" {
		v.Add("owner", detail)
	}
	return owner
}

// ValidateTTL checks a lease length in whole seconds: 1 ≤ ttl ≤ maxTTL
// (seed ATK-05: a zero or negative TTL would create a lock that is already
// expired).
func ValidateTTL(ttlSeconds, maxTTL int64, v *ValidationError) {
	if ttlSeconds < 1 || ttlSeconds > maxTTL {
		v.Add("ttl_seconds", "must be an integer from 1 to "+strconv.FormatInt(maxTTL, 10))
	}
}

// ValidateLockDelay checks an acquire's lock-delay in whole seconds: 0 ≤
// delay ≤ maxDelay; with maxDelay negative (lock-delay off) only 0.
func ValidateLockDelay(delaySeconds, maxDelay int64, v *ValidationError) {
	switch {
	case maxDelay < 0:
		if delaySeconds != 0 {
			v.Add("lock_delay_seconds", "must be 0: this service has no lock-delay")
		}
	case delaySeconds < 0 || delaySeconds > maxDelay:
		v.Add("lock_delay_seconds", "must be an integer from 0 to "+strconv.FormatInt(maxDelay, 10))
	}
}

// NormalizeReason trims white space around a force release's reason and
// checks the rest as NormalizeOwner does, up to MaxReasonBytes: it is
// written to the audit log, where it must not forge or hide lines.
func NormalizeReason(reason string, v *ValidationError) string {
	if !utf8.ValidString(reason) {
		v.Add("reason", "must be valid UTF-8")
		return ""
	}
	reason = strings.TrimSpace(reason)
	if detail := checkName(reason, MaxReasonBytes); detail != "" {
		v.Add("reason", detail)
	}
	return reason
}

// ValidatePrefix checks a listing's name prefix: empty (every lock), or
// 1–255 bytes under the rules of ValidateResource.
func ValidatePrefix(prefix string, v *ValidationError) {
	if prefix == "" {
		return
	}
	if detail := checkName(prefix, MaxResourceBytes); detail != "" {
		v.Add("prefix", detail)
		return
	}
	if strings.Contains(prefix, "/") {
		v.Add("prefix", `must not contain "/"`)
	}
}

// ValidateFencingToken checks an optional fencing token sent back by a
// holder: when present it must be positive.
func ValidateFencingToken(token *int64, v *ValidationError) {
	if token != nil && *token < 1 {
		v.Add("fencing_token", "must be a positive integer")
	}
}

func checkName(s string, maxBytes int) string {
	switch {
	case s == "":
		return "must not be empty"
	case len(s) > maxBytes:
		return "must be at most " + strconv.Itoa(maxBytes) + " bytes"
	case !utf8.ValidString(s):
		return "must be valid UTF-8"
	case strings.ContainsFunc(s, invisible):
		return "must not contain control or invisible formatting characters"
	}
	return ""
}

// invisible reports control characters (Cc), invisible formatting
// characters such as U+200B or the bidi override U+202E (Cf), and the line
// and paragraph separators U+2028/U+2029: all of them make a name look like
// another one in logs and listings.
func invisible(r rune) bool {
	if r < utf8.RuneSelf {
		// ASCII has no Cf, Zl or Zp characters: its controls are the
		// whole story (and the common case, without table lookups).
		return r < 0x20 || r == 0x7f
	}
	return unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp)
}
