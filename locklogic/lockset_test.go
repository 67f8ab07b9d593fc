package locklogic

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ft288/locks/locklogic/dynamofake"
)

// Failure paths of a lock set that dynalite cannot produce on demand; the
// rest is tested against dynalite (internal/integration/lockset_test.go).

// setStore answers a set's writes: acquires are granted (the item echoed),
// except the write of a name in fail (a store error: outcome unknown);
// releases (they set release_id) fail with relErr when not nil.
func setStore(fail string, relErr error) *dynamofake.DB {
	return &dynamofake.DB{Update: func(in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
		name := in.Key[AttrResource].(*types.AttributeValueMemberS).Value
		if _, release := in.ExpressionAttributeValues[":ri"]; release {
			if relErr != nil {
				return nil, relErr
			}
			return &dynamodb.UpdateItemOutput{}, nil
		}
		if name == fail {
			return nil, errors.New("connection reset")
		}
		it := item("w1", "", 7, t0.Add(time.Minute))
		it[AttrResource] = &types.AttributeValueMemberS{Value: name}
		it[AttrGrantID] = in.ExpressionAttributeValues[":gid"]
		return &dynamodb.UpdateItemOutput{Attributes: it}, nil
	}}
}

func TestAcquireSetFailures(t *testing.T) {
	names := []string{"p:c", "p:a", "p:b"}
	// b's write failed (outcome unknown): the rollback reads b and
	// releases it by token only when it finds the set's own grant; b is
	// unreleased either way (the write may still land).
	for _, tc := range []struct {
		name     string
		ownGrant bool
		want     []string
	}{
		{"UnknownOutcomeOwnGrantReleased", true, []string{"p:a/token", "p:b/token"}},
		{"UnknownOutcomeOtherLeaseKept", false, []string{"p:a/token"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := setStore("p:b", nil)
			var setID string
			db.Get = func(in *dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
				it := item("w1", "", 9, time.Now().Add(time.Minute))
				it[AttrGrantID] = &types.AttributeValueMemberS{Value: "a single lease's"}
				if tc.ownGrant {
					it[AttrGrantID] = &types.AttributeValueMemberS{Value: setID}
				}
				return &dynamodb.GetItemOutput{Item: it}, nil
			}
			upd := db.Update
			db.Update = func(in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
				if g, ok := in.ExpressionAttributeValues[":gid"].(*types.AttributeValueMemberS); ok {
					setID = g.Value
				}
				return upd(in)
			}
			_, err := newTestService(db).AcquireSet(context.Background(), SetAcquireRequest{Prefix: "p:", Names: slices.Clone(names),
				Caller: Caller{Owner: "w1"}, TTLSeconds: 60}, Budget{})
			var rb *SetRollbackError
			if !errors.As(err, &rb) || !errors.Is(err, ErrUnavailable) || !slices.Equal(rb.Unreleased, []string{"p:b"}) {
				t.Fatalf("got %v, want ErrUnavailable with p:b unreleased", err)
			}
			var released []string
			for _, in := range db.Updates() {
				if _, ok := in.ExpressionAttributeValues[":ri"]; ok {
					n := in.Key[AttrResource].(*types.AttributeValueMemberS).Value
					_, byToken := in.ExpressionAttributeValues[":tok"]
					released = append(released, n+map[bool]string{true: "/token", false: "/owner"}[byToken])
				}
			}
			if !slices.Equal(released, tc.want) {
				t.Errorf("releases: got %v, want %v", released, tc.want)
			}
			if db.Gets() != 1 {
				t.Errorf("got %d reads, want 1 (b's)", db.Gets())
			}
		})
	}
	t.Run("RollbackFails", func(t *testing.T) {
		db := setStore("p:c", errors.New("connection reset"))
		_, err := newTestService(db).AcquireSet(context.Background(), SetAcquireRequest{Prefix: "p:", Names: slices.Clone(names),
			Caller: Caller{Owner: "w1"}, TTLSeconds: 60}, Budget{})
		var rb *SetRollbackError
		if !errors.As(err, &rb) || !errors.Is(err, ErrUnavailable) {
			t.Fatalf("got %v, want a SetRollbackError", err)
		}
		if want := []string{"p:a", "p:b", "p:c"}; !slices.Equal(rb.Unreleased, want) {
			t.Errorf("unreleased: got %v, want %v", rb.Unreleased, want)
		}
		if !strings.Contains(err.Error(), "p:a, p:b, p:c") {
			t.Errorf("error %q does not name the names", err)
		}
	})
	t.Run("OneGrantIDPerSet", func(t *testing.T) {
		db := setStore("", nil)
		res, err := newTestService(db).AcquireSet(context.Background(), SetAcquireRequest{Prefix: "p:", Names: slices.Clone(names),
			Caller: Caller{Owner: "w1"}, TTLSeconds: 60}, Budget{})
		if err != nil || !res.Acquired {
			t.Fatalf("got %+v %v", res, err)
		}
		for i, l := range res.Locks {
			if l.SetID != res.SetID || !strings.HasPrefix(res.SetID, setIDPrefix) || l.Resource != []string{"p:a", "p:b", "p:c"}[i] {
				t.Errorf("locks[%d]: %s set %q, want set %q in byte order", i, l.Resource, l.SetID, res.SetID)
			}
		}
	})
}
