package locklogic

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/ft288/locks/locklogic/dynamofake"
)

var _ DynamoDBAPI = (*dynamofake.DB)(nil)

var t0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func newTestService(db DynamoDBAPI) *Service {
	return New(db, Config{Table: "t", Now: func() time.Time { return t0 }})
}

func item(owner, principal string, token int64, exp time.Time) map[string]types.AttributeValue {
	it := map[string]types.AttributeValue{
		AttrResource:   &types.AttributeValueMemberS{Value: "r"},
		AttrOwner:      &types.AttributeValueMemberS{Value: owner},
		AttrToken:      num(token),
		AttrAcquiredAt: num(t0.Add(-time.Minute).UnixMilli()),
		AttrExpiresAt:  num(exp.UnixMilli()),
	}
	if principal != "" {
		it[AttrPrincipal] = &types.AttributeValueMemberS{Value: principal}
	}
	return it
}

func ccf(old map[string]types.AttributeValue) error {
	return &types.ConditionalCheckFailedException{Message: strPtr("The conditional request failed"), Item: old}
}

func strPtr(s string) *string { return &s }

func TestAcquireHeld(t *testing.T) {
	holderExp := t0.Add(2500 * time.Millisecond)
	cases := []struct {
		name    string
		old     map[string]types.AttributeValue
		wantExp time.Time
	}{
		{"OldItemReturned", item("w1", "", 7, holderExp), holderExp},
		{"NoOldItem", nil, time.Time{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			db := &dynamofake.DB{Update: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) { return nil, ccf(tc.old) }}
			res, err := newTestService(db).Acquire(context.Background(), AcquireRequest{Resource: "r", Caller: Caller{Owner: "w2"}, TTLSeconds: 30})
			if err != nil || res.Acquired {
				t.Fatalf("got %+v, %v; want not acquired, nil error", res, err)
			}
			if !res.HolderExpiresAt.Equal(tc.wantExp) {
				t.Errorf("got holder expiry %v, want %v", res.HolderExpiresAt, tc.wantExp)
			}
			if db.Gets() != 0 || len(db.Updates()) != 1 {
				t.Errorf("got %d updates and %d gets, want 1 and 0 (no extra read for holder info)", len(db.Updates()), db.Gets())
			}
			if rv := db.Updates()[0].ReturnValuesOnConditionCheckFailure; rv != types.ReturnValuesOnConditionCheckFailureAllOld {
				t.Errorf("got ReturnValuesOnConditionCheckFailure %q, want ALL_OLD", rv)
			}
		})
	}
}

// TestAcquireUsesPlaceholders checks that caller input reaches DynamoDB only
// as expression attribute values and the key, never inside an expression
// (seed ATK-06; that such names and owners are stored and compared
// verbatim is tested against dynalite, internal/integration TestAttacks).
func TestAcquireUsesPlaceholders(t *testing.T) {
	evil := `x'; DROP TABLE locks; -- #o = :o OR attribute_exists(#r)`
	db := &dynamofake.DB{Update: func(in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
		return &dynamodb.UpdateItemOutput{Attributes: item(evil, "", 1, t0.Add(time.Minute))}, nil
	}}
	res, err := newTestService(db).Acquire(context.Background(), AcquireRequest{Resource: evil, Caller: Caller{Owner: evil}, TTLSeconds: 60})
	if err != nil || !res.Acquired {
		t.Fatalf("got %+v, %v", res, err)
	}
	in := db.Updates()[0]
	for _, expr := range []string{*in.UpdateExpression, *in.ConditionExpression} {
		if strings.Contains(expr, "DROP") || strings.Contains(expr, AttrOwner) || strings.Contains(expr, AttrExpiresAt) {
			t.Errorf("expression %q contains input or a literal attribute name", expr)
		}
	}
	verbatim := false
	for _, v := range in.ExpressionAttributeValues {
		if s, ok := v.(*types.AttributeValueMemberS); ok && s.Value == evil {
			verbatim = true
		}
	}
	if !verbatim {
		t.Errorf("got values %v, want the owner among them verbatim", in.ExpressionAttributeValues)
	}
	if k := in.Key[AttrResource].(*types.AttributeValueMemberS).Value; k != evil {
		t.Errorf("got key %q, want the resource verbatim", k)
	}
}

func TestRenewReleaseOutcomes(t *testing.T) {
	tok := int64(42)
	other := int64(41)
	live, expired := t0.Add(time.Minute), t0
	cases := []struct {
		name     string
		old      map[string]types.AttributeValue // returned with the failed condition
		getItem  map[string]types.AttributeValue // returned by the follow-up read (when old is nil)
		caller   Caller
		token    *int64
		want     error
		wantGets int
	}{
		{"NotFoundAbsent", nil, nil, Caller{Owner: "w1"}, nil, ErrNotFound, 1},
		{"NotFoundExpired", item("w1", "", tok, expired), nil, Caller{Owner: "w1"}, nil, ErrNotFound, 0},
		{"Forbidden", item("w1", "", tok, live), nil, Caller{Owner: "w2"}, nil, ErrForbidden, 0},
		{"ForbiddenOtherPrincipal", item("w1", "arn:a", tok, live), nil, Caller{Owner: "w1", Principal: "arn:b"}, nil, ErrForbidden, 0},
		{"ForbiddenNoPrincipal", item("w1", "arn:a", tok, live), nil, Caller{Owner: "w1"}, nil, ErrForbidden, 0},
		{"StaleToken", item("w1", "", tok, live), nil, Caller{Owner: "w1"}, &other, ErrStaleToken, 0},
		{"ReadAfterDynalite", nil, item("w1", "", tok, live), Caller{Owner: "w2"}, nil, ErrForbidden, 1},
		{"ChangedSinceWrite", nil, item("w1", "", tok, live), Caller{Owner: "w1"}, &tok, ErrNotFound, 1},
	}
	for _, tc := range cases {
		for _, op := range []string{"Renew", "Release"} {
			t.Run(tc.name+"/"+op, func(t *testing.T) {
				db := &dynamofake.DB{
					Update: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) { return nil, ccf(tc.old) },
					Get: func(*dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
						return &dynamodb.GetItemOutput{Item: tc.getItem}, nil
					},
				}
				s := newTestService(db)
				var err error
				if op == "Renew" {
					_, err = s.Renew(context.Background(), RenewRequest{Resource: "r", Caller: tc.caller, TTLSeconds: 30, FencingToken: tc.token})
				} else {
					err = s.Release(context.Background(), ReleaseRequest{Resource: "r", Caller: tc.caller, FencingToken: tc.token})
				}
				if !errors.Is(err, tc.want) {
					t.Errorf("got %v, want %v", err, tc.want)
				}
				if db.Gets() != tc.wantGets {
					t.Errorf("got %d reads, want %d", db.Gets(), tc.wantGets)
				}
			})
		}
	}
}

// TestRenewAfterLaterRenewal: on DynamoDB (old item returned, no read), a
// renew that finds its own lease renewed by a later request is answered with
// that lease when it runs at least as far as asked, else ErrUnavailable to
// retry — and a release in the same situation is unaffected by renewed_at.
func TestRenewAfterLaterRenewal(t *testing.T) {
	tok := int64(42)
	later := func(exp time.Time) map[string]types.AttributeValue {
		it := item("w1", "", tok, exp)
		it[AttrRenewedAt] = num(t0.Add(time.Second).UnixMilli()) // stamped after this request's now
		return it
	}
	cases := []struct {
		name    string
		exp     time.Time
		wantErr error
	}{
		{"RunsFurther", t0.Add(31 * time.Second), nil},
		{"RunsAsFar", t0.Add(30 * time.Second), nil},
		{"RunsShorter", t0.Add(10 * time.Second), ErrUnavailable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			db := &dynamofake.DB{Update: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) { return nil, ccf(later(tc.exp)) }}
			lock, err := newTestService(db).Renew(context.Background(), RenewRequest{Resource: "r", Caller: Caller{Owner: "w1"}, TTLSeconds: 30, FencingToken: &tok})
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("got %v, want %v", err, tc.wantErr)
			}
			if err == nil && (!lock.ExpiresAt.Equal(tc.exp) || lock.FencingToken != tok || lock.Resource != "r") {
				t.Errorf("got %+v, want the stored lease (expires %v, token %d)", lock, tc.exp, tok)
			}
			if db.Gets() != 0 {
				t.Errorf("got %d reads, want none", db.Gets())
			}
		})
	}
	db := &dynamofake.DB{Update: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
		return nil, ccf(later(t0.Add(time.Minute)))
	}}
	if err := newTestService(db).Release(context.Background(), ReleaseRequest{Resource: "r", Caller: Caller{Owner: "w1"}}); !errors.Is(err, ErrNotFound) {
		t.Errorf("release: got %v, want ErrNotFound (the lease changed since the write)", err)
	}
}

type apiErr struct{ code string }

func (e apiErr) Error() string                 { return e.code + ": secret detail about table t" }
func (e apiErr) ErrorCode() string             { return e.code }
func (e apiErr) ErrorMessage() string          { return "m" }
func (e apiErr) ErrorFault() smithy.ErrorFault { return smithy.FaultServer }

func TestStoreErrors(t *testing.T) {
	cases := []struct {
		name        string
		err         error
		unavailable bool
	}{
		{"Throttled", apiErr{"ProvisionedThroughputExceededException"}, true},
		{"Throttling", apiErr{"ThrottlingException"}, true},
		{"InternalServerError", apiErr{"InternalServerError"}, true},
		{"ReplicatedWriteConflict", apiErr{"ReplicatedWriteConflictException"}, true}, // multi-Region strong consistency
		{"RetriesExhausted", &retry.MaxAttemptsError{Attempt: 3, Err: errors.New("boom")}, true},
		{"Timeout", context.DeadlineExceeded, true},
		{"TableMissing", &types.ResourceNotFoundException{Message: strPtr("Requested resource not found")}, false},
		{"Validation", apiErr{"ValidationException"}, false},
		{"AccessDenied", apiErr{"AccessDeniedException"}, false},
		{"CutOffReply", &smithy.DeserializationError{Err: io.ErrUnexpectedEOF}, true},
		{"ConnectionReset", &net.OpError{Op: "read", Err: errors.New("connection reset by peer")}, true},
		{"EndpointHostUnknown", &net.DNSError{Err: "no such host", Name: "dynamodb.example.invalid", IsNotFound: true}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			db := &dynamofake.DB{
				Update: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) { return nil, tc.err },
				Get:    func(*dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) { return nil, tc.err },
			}
			s := newTestService(db)
			res, err := s.Acquire(context.Background(), AcquireRequest{Resource: "r", Caller: Caller{Owner: "w"}, TTLSeconds: 1})
			if err == nil || res.Acquired {
				t.Fatalf("acquire: got %+v, %v; want an error and never acquired", res, err)
			}
			_, serr := s.Status(context.Background(), "r")
			rerr := s.Release(context.Background(), ReleaseRequest{Resource: "r", Caller: Caller{Owner: "w"}})
			for _, e := range []error{err, serr, rerr} {
				if got := errors.Is(e, ErrUnavailable); got != tc.unavailable {
					t.Errorf("errors.Is(%v, ErrUnavailable) = %v, want %v", e, got, tc.unavailable)
				}
				if errors.Is(e, ErrNotFound) || errors.Is(e, ErrForbidden) {
					t.Errorf("store failure %v reported as a lock outcome", e)
				}
			}
		})
	}
}

func TestValidation(t *testing.T) {
	cases := []struct {
		name     string
		resource string
		owner    string
		ttl      int64
		field    string // "" when valid
	}{
		{"OK", "payment:42", "w1", 30, ""},
		{"OKMaxTTL", "r", "w1", DefaultMaxTTLSeconds, ""},
		{"OKUnicode", "zahlung-ä-42", "wörker", 1, ""},
		{"ErrTTLZero", "r", "w1", 0, "ttl_seconds"},
		{"ErrTTLNegative", "r", "w1", -100, "ttl_seconds"},
		{"ErrTTLTooLong", "r", "w1", DefaultMaxTTLSeconds + 1, "ttl_seconds"},
		{"ErrOwnerEmpty", "r", "", 30, "owner"},
		{"ErrOwnerBlank", "r", " \t ", 30, "owner"},
		{"ErrOwnerControl", "r", "w\x071", 30, "owner"},
		{"ErrOwnerTooLong", "r", strings.Repeat("o", 256), 30, "owner"},
		{"ErrOwnerInvalidUTF8", "r", "w\xff", 30, "owner"},
		{"ErrResourceEmpty", "", "w1", 30, "resource"},
		{"ErrResourceTooLong", strings.Repeat("r", 256), "w1", 30, "resource"},
		{"ErrResourceSlash", "a/b", "w1", 30, "resource"},
		{"ErrResourceControl", "a\nb", "w1", 30, "resource"},
		{"ErrResourceInvalidUTF8", "a\xc3", "w1", 30, "resource"},
		{"ErrResourceBidiOverride", "pay\u202ement", "w1", 30, "resource"},
		{"ErrOwnerZeroWidthSpace", "r", "w\u200b1", 30, "owner"},
		{"ErrOwnerLineSeparator", "r", "w\u20281", 30, "owner"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			db := &dynamofake.DB{Update: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
				return &dynamodb.UpdateItemOutput{Attributes: item("w1", "", 1, t0.Add(time.Second))}, nil
			}}
			_, err := newTestService(db).Acquire(context.Background(), AcquireRequest{Resource: tc.resource, Caller: Caller{Owner: tc.owner}, TTLSeconds: tc.ttl})
			var verr *ValidationError
			if tc.field == "" {
				if err != nil {
					t.Fatalf("got %v, want valid", err)
				}
				return
			}
			if !errors.As(err, &verr) || len(verr.Fields) != 1 || verr.Fields[0].Field != tc.field {
				t.Fatalf("got %v, want one validation error on %s", err, tc.field)
			}
			if len(db.Updates()) != 0 {
				t.Errorf("invalid input reached the store")
			}
		})
	}
}

// TestReleaseRetriedAfterLostAnswer: when the SDK retries a release whose
// first attempt succeeded, the retry's failed condition finds this call's
// own tombstone, and the release is reported done, not 404.
func TestReleaseRetriedAfterLostAnswer(t *testing.T) {
	for _, tc := range []struct {
		name string
		own  bool
		want error
	}{{"OwnTombstone", true, nil}, {"OtherTombstone", false, ErrNotFound}} {
		t.Run(tc.name, func(t *testing.T) {
			db := &dynamofake.DB{Update: func(in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
				tomb := item("w1", "", 7, t0)
				tomb[AttrReleasedAt] = num(t0.UnixMilli())
				id := "someone-else"
				if tc.own {
					id = in.ExpressionAttributeValues[":ri"].(*types.AttributeValueMemberS).Value
				}
				tomb[AttrReleaseID] = &types.AttributeValueMemberS{Value: id}
				return nil, ccf(tomb)
			}}
			tok := int64(7)
			err := newTestService(db).Release(context.Background(), ReleaseRequest{Resource: "r", Caller: Caller{Owner: "w1"}, FencingToken: &tok})
			if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

// TestOldItemOnFailureSkipsRead: against a store that returns the old item
// with every failed condition (DynamoDB), a failure without one means the
// item is absent: 404 without a read.
func TestOldItemOnFailureSkipsRead(t *testing.T) {
	db := &dynamofake.DB{Update: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) { return nil, ccf(nil) }}
	s := New(db, Config{Table: "t", Now: func() time.Time { return t0 }, OldItemOnFailure: true})
	_, rerr := s.Renew(context.Background(), RenewRequest{Resource: "r", Caller: Caller{Owner: "w1"}, TTLSeconds: 5})
	lerr := s.Release(context.Background(), ReleaseRequest{Resource: "r", Caller: Caller{Owner: "w1"}})
	if !errors.Is(rerr, ErrNotFound) || !errors.Is(lerr, ErrNotFound) || db.Gets() != 0 {
		t.Fatalf("got renew %v, release %v, %d reads; want ErrNotFound twice and no read", rerr, lerr, db.Gets())
	}
}

// TestReleaseRetryAfterReacquire: the first attempt of a release succeeded,
// its answer was lost, and another owner acquired before the SDK's retry,
// keeping release_id (as internal/integration TestReleaseSDKRetryAfterNextGrant
// checks against dynalite). The retry must still report the release it
// made, not 403.
func TestReleaseRetryAfterReacquire(t *testing.T) {
	db := &dynamofake.DB{Update: func(in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
		// The retry: its id is on the item the other owner now holds.
		acquired := item("w2", "", 8, t0.Add(time.Minute))
		acquired[AttrReleaseID] = in.ExpressionAttributeValues[":ri"]
		return nil, ccf(acquired)
	}}
	tok := int64(7)
	if err := newTestService(db).Release(context.Background(), ReleaseRequest{Resource: "r", Caller: Caller{Owner: "w1"}, FencingToken: &tok}); err != nil {
		t.Fatalf("got %v, want the release reported done", err)
	}
}
