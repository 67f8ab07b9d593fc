package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ft288/locks/api"
)

// The IAM policies in docs/ (operations.md, api.md, deploy.md), evaluated
// the way IAM evaluates execute-api:Invoke against the ARN of a request.

// docPolicy is an identity policy as the documents write it.
type docPolicy struct {
	Version   string
	Statement []docStatement
}

// docStatement is one statement; Action and Resource are a string or a
// list. Any other member fails the test: the evaluation below knows these
// only.
type docStatement struct {
	Sid      string
	Effect   string
	Action   any
	Resource any
}

// jsonBlocks returns the text of every ```json fenced block of the
// Markdown file at path (relative to the repository root).
func jsonBlocks(tb testing.TB, path string) []string {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join("..", path))
	if err != nil {
		tb.Fatal(err)
	}
	var blocks []string
	for _, m := range regexp.MustCompile("(?ms)^```json\n(.*?)^```").FindAllStringSubmatch(string(b), -1) {
		blocks = append(blocks, m[1])
	}
	return blocks
}

// docPolicies parses the fenced JSON blocks of path: each must be JSON;
// those with a Statement are policies, returned by statement Sid.
func docPolicies(tb testing.TB, path string) map[string][]docStatement {
	tb.Helper()
	bySid := map[string][]docStatement{}
	for _, block := range jsonBlocks(tb, path) {
		var probe map[string]json.RawMessage
		if err := json.Unmarshal([]byte(block), &probe); err != nil {
			tb.Fatalf("%s: a json block is not JSON: %v\n%s", path, err, block)
		}
		if _, ok := probe["Statement"]; !ok {
			continue // an example answer, not a policy
		}
		dec := json.NewDecoder(strings.NewReader(block))
		dec.DisallowUnknownFields()
		var p docPolicy
		if err := dec.Decode(&p); err != nil {
			tb.Fatalf("%s: policy with members this test does not evaluate: %v\n%s", path, err, block)
		}
		if p.Version != "2012-10-17" {
			tb.Errorf("%s: policy Version %q, want 2012-10-17", path, p.Version)
		}
		for _, st := range p.Statement {
			bySid[st.Sid] = append(bySid[st.Sid], st)
		}
	}
	return bySid
}

// policyList turns a policy's Action or Resource, a string or a list of them,
// into a list.
func policyList(tb testing.TB, v any) []string {
	tb.Helper()
	switch v := v.(type) {
	case string:
		return []string{v}
	case []any:
		out := make([]string, len(v))
		for i, e := range v {
			s, ok := e.(string)
			if !ok {
				tb.Fatalf("policy element %v is not a string", e)
			}
			out[i] = s
		}
		return out
	}
	tb.Fatalf("policy element %v: want a string or a list", v)
	return nil
}

// invokeAllowed reports whether statements allow execute-api:Invoke on arn:
// an Allow whose action and resource match, and no Deny that does.
func invokeAllowed(tb testing.TB, statements []docStatement, arn string) bool {
	tb.Helper()
	allowed := false
	for _, st := range statements {
		action := slices.ContainsFunc(policyList(tb, st.Action), func(a string) bool {
			return globMatch(strings.ToLower(a), "execute-api:invoke") // action names are case-insensitive
		})
		resource := slices.ContainsFunc(policyList(tb, st.Resource), func(r string) bool { return globMatch(r, arn) })
		switch {
		case !action || !resource:
		case st.Effect == "Deny":
			return false
		case st.Effect == "Allow":
			allowed = true
		default:
			tb.Fatalf("statement %s: Effect %q", st.Sid, st.Effect)
		}
	}
	return allowed
}

// requestARN is the ARN IAM checks for a request of route r on the
// $default stage with {resource} (or a semaphore's {name}) = name, in the
// documents' placeholders.
func requestARN(r api.Route, name string) string {
	path := strings.NewReplacer("{resource}", name, "{name}", name, "{prefix}", name).Replace(r.Path)
	return "arn:aws:execute-api:REGION:ACCOUNT:API_ID/$default/" + r.Method + path
}

// routeByKey returns the api.Routes row with key.
func routeByKey(tb testing.TB, key string) api.Route {
	tb.Helper()
	i := slices.IndexFunc(api.Routes, func(r api.Route) bool { return r.Key() == key })
	if i < 0 {
		tb.Fatalf("no route %s in api.Routes", key)
	}
	return api.Routes[i]
}

func TestGlobMatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern, s string
		want       bool
	}{
		{"a*c", "abc", true},
		{"a*c", "ac", true},
		{"a*c", "a/b/c", true}, // * spans /
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{"a?c", "abbc", false},
		{"abc", "ABC", false}, // case-sensitive
		{"abc", "abcd", false},
		{"*", "", true},
		{"locks/team-a:*", "locks/team-a:x/renew", true},
		{"locks/team-a:*", "locks/team-b:x", false},
	}
	for _, tt := range tests {
		if got := globMatch(tt.pattern, tt.s); got != tt.want {
			t.Errorf("globMatch(%q, %q): got %v, want %v", tt.pattern, tt.s, got, tt.want)
		}
	}
}

// TestDocsPolicies evaluates the policies the documents print: the team
// policy of docs/operations.md reaches exactly team A's names on the lock
// routes, the lock user policies of docs/api.md and docs/deploy.md every
// lock route and no admin route, and their administrator policies the
// admin routes only. (docs/ tables of contents: internal/doccheck.)
func TestDocsPolicies(t *testing.T) {
	t.Parallel()
	t.Run("TeamA", func(t *testing.T) {
		team := docPolicies(t, "docs/operations.md")["TeamALocks"]
		if len(team) != 1 {
			t.Fatalf("got %d TeamALocks statements in docs/operations.md, want 1", len(team))
		}
		tests := []struct {
			name, key, resource string
			want                bool
		}{
			{"Acquire", "POST /locks/{resource}", "team-a:job", true},
			{"Status", "GET /locks/{resource}", "team-a:job", true},
			{"Release", "DELETE /locks/{resource}", "team-a:job", true},
			{"Renew", "POST /locks/{resource}/renew", "team-a:job", true},
			{"Wait", "POST /locks/{resource}/wait", "team-a:job", true},
			{"WaitOtherTeam", "POST /locks/{resource}/wait", "team-b:job", false},
			{"AcquireOtherTeam", "POST /locks/{resource}", "team-b:job", false},
			{"StatusOtherTeam", "GET /locks/{resource}", "team-b:job", false},
			{"ReleaseOtherTeam", "DELETE /locks/{resource}", "team-b:job", false},
			{"RenewOtherTeam", "POST /locks/{resource}/renew", "team-b:job", false},
			{"PrefixWithoutSeparator", "POST /locks/{resource}", "team-ab", false},
			{"CaseMatters", "POST /locks/{resource}", "Team-A:job", false},
			{"ForceReleaseOwnTeam", "DELETE /admin/locks/{resource}", "team-a:job", false},
			// Lock sets: the path's prefix is what IAM sees, and every
			// name must begin with it (the service refuses others).
			{"LockSet", "POST /locksets/{prefix}", "team-a:", true},
			{"LockSetRenew", "POST /locksets/{prefix}/renew", "team-a:acct", true},
			{"LockSetWait", "POST /locksets/{prefix}/wait", "team-a:", true},
			{"LockSetRelease", "DELETE /locksets/{prefix}", "team-a:", true},
			{"LockSetOtherTeam", "POST /locksets/{prefix}", "team-b:", false},
			{"LockSetWithoutSeparator", "POST /locksets/{prefix}", "team-a", false},
			{"List", "GET /admin/locks", "", false},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				arn := requestARN(routeByKey(t, tt.key), tt.resource)
				if got := invokeAllowed(t, team, arn); got != tt.want {
					t.Errorf("%s: got allowed %v, want %v", arn, got, tt.want)
				}
			})
		}
		// The per-method resources are what keeps admin out: the shorter
		// pattern the document warns about would let the team in.
		short := []docStatement{{Effect: "Allow", Action: "execute-api:Invoke",
			Resource: "arn:aws:execute-api:REGION:ACCOUNT:API_ID/*/*/locks/team-a:*"}}
		if arn := requestARN(routeByKey(t, "DELETE /admin/locks/{resource}"), "team-a:job"); !invokeAllowed(t, short, arn) {
			t.Errorf("API_ID/*/*/locks/team-a:* does not match %s; the document says it does", arn)
		}
	})
	t.Run("LockUserAndAdmin", func(t *testing.T) {
		// api.md (Admin API) writes both statements in one policy,
		// deploy.md (Lock users and administrators) one policy each.
		var users, admins []docStatement
		for _, doc := range []string{"docs/api.md", "docs/deploy.md"} {
			bySid := docPolicies(t, doc)
			if len(bySid["LockUser"]) != 1 || len(bySid["LockAdmin"]) != 1 {
				t.Fatalf("got %d LockUser and %d LockAdmin statements in %s, want one each",
					len(bySid["LockUser"]), len(bySid["LockAdmin"]), doc)
			}
			users, admins = append(users, bySid["LockUser"]...), append(admins, bySid["LockAdmin"]...)
		}
		for _, name := range []string{"orders-db", "team-a:job", "admin", "locks", "renew", "semaphores"} {
			for _, r := range api.Routes {
				arn := requestARN(r, name)
				for _, st := range users {
					if got := invokeAllowed(t, []docStatement{st}, arn); got == r.Admin {
						t.Errorf("a documented LockUser statement allows %s: %v, want %v", arn, got, !r.Admin)
					}
				}
				for _, st := range admins {
					if got := invokeAllowed(t, []docStatement{st}, arn); got != r.Admin {
						t.Errorf("a documented LockAdmin statement allows %s: %v, want %v", arn, got, r.Admin)
					}
				}
			}
		}
	})
}
