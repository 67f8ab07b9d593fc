package api

import (
	"bytes"
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ft288/locks/locklogic/dynamofake"
)

func TestParseAdminPrincipals(t *testing.T) {
	tests := []struct {
		name    string
		list    string
		want    []string
		wantErr string // a part of the error; "" for none
	}{
		{name: "Empty", list: "", want: nil},
		{name: "Blank", list: "  ", want: nil},
		{name: "Role", list: "arn:aws:iam::111122223333:role/ops", want: []string{"arn:aws:iam::111122223333:role/ops"}},
		{name: "RoleWithPath", list: "arn:aws:iam::111122223333:role/aws-reserved/sso.amazonaws.com/eu-west-1/AWSReservedSSO_Admin_0123abcd",
			want: []string{"arn:aws:iam::111122223333:role/aws-reserved/sso.amazonaws.com/eu-west-1/AWSReservedSSO_Admin_0123abcd"}},
		{name: "SeveralTrimmed", list: " arn:aws:iam::111122223333:user/alice ,arn:aws:iam::111122223333:root",
			want: []string{"arn:aws:iam::111122223333:user/alice", "arn:aws:iam::111122223333:root"}},
		{name: "Session", list: "arn:aws:sts::111122223333:assumed-role/ops/alice@example.com",
			want: []string{"arn:aws:sts::111122223333:assumed-role/ops/alice@example.com"}},
		{name: "FederatedUser", list: "arn:aws:sts::111122223333:federated-user/bob", want: []string{"arn:aws:sts::111122223333:federated-user/bob"}},
		{name: "OtherPartition", list: "arn:aws-us-gov:iam::111122223333:role/ops", want: []string{"arn:aws-us-gov:iam::111122223333:role/ops"}},
		{name: "ErrNotAnARN", list: "ops", wantErr: `"ops" is not an IAM or STS principal ARN`},
		{name: "ErrEmptyEntry", list: "arn:aws:iam::111122223333:role/ops,", wantErr: "empty entry"},
		{name: "ErrWildcard", list: "arn:aws:iam::111122223333:role/*", wantErr: "not an IAM or STS"},
		{name: "ErrOtherService", list: "arn:aws:s3:::bucket", wantErr: "not an IAM or STS"},
		{name: "ErrShortAccount", list: "arn:aws:iam::1111:role/ops", wantErr: "not an IAM or STS"},
		{name: "ErrGroup", list: "arn:aws:iam::111122223333:group/admins", wantErr: "not an IAM or STS"},
		{name: "ErrRoleSessionWithoutSession", list: "arn:aws:sts::111122223333:assumed-role/ops", wantErr: "without a session"},
		{name: "ErrRegion", list: "arn:aws:iam:eu-west-1:111122223333:role/ops", wantErr: "not an IAM or STS"},
		{name: "ErrEveryBadEntry", list: "x,arn:aws:iam::111122223333:role/ops,y", wantErr: `"y"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseAdminPrincipals(tt.list)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, %v; want an error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// TestAdminAllows: which callers (the IAM authorizer's userArn) an
// allowlist admits.
func TestAdminAllows(t *testing.T) {
	const (
		opsRole     = "arn:aws:iam::111122223333:role/ops"
		ssoRole     = "arn:aws:iam::111122223333:role/aws-reserved/sso.amazonaws.com/AWSReservedSSO_Admin_0123"
		alice       = "arn:aws:iam::111122223333:user/alice"
		oneSession  = "arn:aws:sts::111122223333:assumed-role/oncall/pager-7"
		opsSession  = "arn:aws:sts::111122223333:assumed-role/ops/i-0abc"
		cnOpsRole   = "arn:aws-cn:iam::111122223333:role/ops"
		cnOpsCaller = "arn:aws-cn:sts::111122223333:assumed-role/ops/s"
	)
	tests := []struct {
		name   string
		list   []string
		caller string
		want   bool
	}{
		{name: "RoleSession", list: []string{opsRole}, caller: opsSession, want: true},
		{name: "RoleWithPathSession", list: []string{ssoRole},
			caller: "arn:aws:sts::111122223333:assumed-role/AWSReservedSSO_Admin_0123/alice@example.com", want: true},
		{name: "User", list: []string{opsRole, alice}, caller: alice, want: true},
		{name: "ExactSession", list: []string{oneSession}, caller: oneSession, want: true},
		{name: "OtherPartition", list: []string{cnOpsRole}, caller: cnOpsCaller, want: true},
		{name: "OtherSessionOfListedSession", list: []string{oneSession},
			caller: "arn:aws:sts::111122223333:assumed-role/oncall/pager-8", want: false},
		{name: "OtherRole", list: []string{opsRole}, caller: "arn:aws:sts::111122223333:assumed-role/ops-readonly/i-0abc", want: false},
		{name: "RoleNamePrefix", list: []string{"arn:aws:iam::111122223333:role/op"}, caller: opsSession, want: false},
		{name: "OtherAccount", list: []string{opsRole}, caller: "arn:aws:sts::444455556666:assumed-role/ops/i-0abc", want: false},
		{name: "PartitionMismatch", list: []string{opsRole}, caller: cnOpsCaller, want: false},
		{name: "UserOfRoleName", list: []string{opsRole}, caller: "arn:aws:iam::111122223333:user/ops", want: false},
		{name: "RoleEntryIsNoUser", list: []string{alice}, caller: "arn:aws:sts::111122223333:assumed-role/alice/s", want: false},
		{name: "EmptySession", list: []string{opsRole}, caller: "arn:aws:sts::111122223333:assumed-role/ops/", want: false},
		{name: "SessionWithSlash", list: []string{opsRole}, caller: "arn:aws:sts::111122223333:assumed-role/ops/a/b", want: false},
		{name: "CaseMatters", list: []string{opsRole}, caller: "arn:aws:sts::111122223333:assumed-role/OPS/i-0abc", want: false},
		{name: "NoCaller", list: []string{opsRole}, caller: "", want: false},
		{name: "EmptyList", list: nil, caller: alice, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := newAdminSet(tt.list).allows(tt.caller); got != tt.want {
				t.Errorf("list %q allows %q: got %v, want %v", tt.list, tt.caller, got, tt.want)
			}
		})
	}
}

// TestAdminRoutesAllowlist runs real admin events (signed by the session
// arn:aws:sts::123456789012:assumed-role/admin/alice) through the handler
// with and without an allowlist: a refused call is a 403
// not-an-administrator problem that reaches no store, logs an audit line
// and counts as Outcome forbidden; the lock routes ignore the list.
func TestAdminRoutesAllowlist(t *testing.T) {
	const adminRole = "arn:aws:iam::123456789012:role/admin"
	routes := []struct {
		name, file string
		okStatus   int
	}{
		{name: "List", file: "admin-list-iam.json", okStatus: 200},
		{name: "ForceRelease", file: "admin-force-release-iam.json", okStatus: 200},
	}
	tests := []struct {
		name    string
		set     bool // SetAdmins called
		admins  []string
		noIAM   bool // the event carries no IAM identity
		allowed bool
	}{
		{name: "NeverSetIsOpen", set: false, allowed: true},
		{name: "NeverSetIsOpenWithoutIAM", set: false, noIAM: true, allowed: true},
		{name: "RoleListed", set: true, admins: []string{adminRole}, allowed: true},
		{name: "SessionListed", set: true, admins: []string{"arn:aws:sts::123456789012:assumed-role/admin/alice"}, allowed: true},
		{name: "ErrOtherRole", set: true, admins: []string{"arn:aws:iam::123456789012:role/ops"}},
		{name: "ErrEmptyList", set: true, admins: nil},
		{name: "ErrNoIdentity", set: true, admins: []string{adminRole}, noIAM: true},
	}
	for _, ev := range routes {
		for _, tt := range tests {
			t.Run(ev.name+"/"+tt.name, func(t *testing.T) {
				db := &dynamofake.DB{
					ScanFunc: func(*dynamodb.ScanInput) (*dynamodb.ScanOutput, error) { return &dynamodb.ScanOutput{}, nil },
					Update: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
						return &dynamodb.UpdateItemOutput{Attributes: lockItem("w1", 7, t0.Add(30*time.Second))}, nil
					},
				}
				var logs bytes.Buffer
				h := newTestHandler(db, &logs)
				if tt.set {
					h.SetAdmins(tt.admins)
				}
				req := loadEvent(t, ev.file)
				if tt.noIAM {
					req.RequestContext.Authorizer = nil
				}
				resp, err := h.Admin(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				touched := len(db.Scans()) + len(db.Updates())
				if tt.allowed {
					if resp.StatusCode != ev.okStatus || touched == 0 {
						t.Fatalf("got %d %s after %d store calls, want %d from the store", resp.StatusCode, resp.Body, touched, ev.okStatus)
					}
					return
				}
				body := decodeBody(t, resp)
				if resp.StatusCode != 403 || body["type"] != ProblemTypeBase+"not-an-administrator" ||
					body["title"] != "Not an administrator" || body["status"] != 403.0 ||
					resp.Headers["content-type"] != "application/problem+json" {
					t.Fatalf("got %d %v %s, want 403 problem not-an-administrator", resp.StatusCode, resp.Headers, resp.Body)
				}
				if touched != 0 {
					t.Errorf("a refused admin call made %d store calls, want none", touched)
				}
				var audit, request map[string]any
				for _, l := range logLines(t, &logs) {
					switch {
					case l["msg"] == "audit":
						audit = l
					case l["outcome"] != nil:
						request = l
					}
				}
				wantCaller := "arn:aws:sts::123456789012:assumed-role/admin/alice"
				if tt.noIAM {
					wantCaller = "anonymous"
				}
				if audit["action"] != "admin-refused" || audit["principal"] != wantCaller || audit["route"] != req.RouteKey {
					t.Errorf("got audit line %v, want admin-refused by %s on %s", audit, wantCaller, req.RouteKey)
				}
				if request["outcome"] != "not-an-administrator" || request["status"] != 403.0 || request["Outcome"] != "forbidden" {
					t.Errorf("got request line %v, want outcome not-an-administrator, status 403, metric Outcome forbidden", request)
				}
			})
		}
	}

	t.Run("LockRoutesIgnoreTheList", func(t *testing.T) {
		db := &dynamofake.DB{Update: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
			return &dynamodb.UpdateItemOutput{Attributes: lockItem("w1", 7, t0.Add(30*time.Second))}, nil
		}}
		h := newTestHandler(db, io.Discard)
		h.SetAdmins(nil)
		resp, _ := h.Acquire(context.Background(), loadEvent(t, "acquire-iam.json"))
		if resp.StatusCode != 200 || !strings.Contains(resp.Body, `"acquired":true`) {
			t.Errorf("acquire with an empty admin list: got %d %s, want 200 acquired", resp.StatusCode, resp.Body)
		}
	})
}

// TestNewFromEnvRefusesAdminsByDefault: a Lambda handler built from an
// environment without ADMIN_PRINCIPALS refuses the admin routes.
func TestNewFromEnvRefusesAdminsByDefault(t *testing.T) {
	for _, tt := range []struct {
		name, admins string
		want         int // 0: NewFromEnv fails
	}{
		{name: "Missing", admins: "", want: 403},
		{name: "Listed", admins: "arn:aws:iam::123456789012:role/admin", want: 200},
		{name: "ErrMalformed", admins: "admin", want: 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("TABLE_NAME", "locks")
			t.Setenv("AWS_REGION", "us-east-1")
			t.Setenv("DYNAMODB_ENDPOINT", "http://127.0.0.1:1") // no store is reached
			t.Setenv(AdminPrincipalsEnv, tt.admins)
			h, err := NewFromEnv(context.Background())
			if tt.want == 0 {
				if err == nil || !strings.Contains(err.Error(), AdminPrincipalsEnv) {
					t.Fatalf("got error %v, want one naming %s", err, AdminPrincipalsEnv)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			db := &dynamofake.DB{ScanFunc: func(*dynamodb.ScanInput) (*dynamodb.ScanOutput, error) {
				return &dynamodb.ScanOutput{Items: []map[string]types.AttributeValue{}}, nil
			}}
			test := newTestHandler(db, io.Discard)
			h.svc, h.log = test.svc, test.log // keep the allowlist, swap the store and the log
			resp, _ := h.Admin(context.Background(), loadEvent(t, "admin-list-iam.json"))
			if resp.StatusCode != tt.want {
				t.Errorf("got %d %s, want %d", resp.StatusCode, resp.Body, tt.want)
			}
		})
	}
}
