package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ft288/locks/internal/testenv"
)

// names holds the resource name of each running test, see res.
var names sync.Map // testing.TB → string

// res returns a resource name unique to the running test: its name plus a
// per-run suffix, so -count=N runs against one dynalite never meet each
// other's leases. Calls from the same test return the same name.
func res(t testing.TB) string {
	name, _ := names.LoadOrStore(t, fmt.Sprintf("%s#%d", strings.ReplaceAll(t.Name(), "/", ":"), time.Now().UnixNano()))
	return name.(string)
}

// TestAttacks covers the seed design's attacks ATK-01..12 (ATK-10, the
// concurrent race, is TestConcurrentAcquireOneWinner).
func TestAttacks(t *testing.T) {
	t.Parallel()
	clock := testenv.NewClock()
	srv := testenv.Start(t, testenv.Options{Now: clock.Now})

	t.Run("ATK01_AcquireHeldByOther", func(t *testing.T) {
		r0 := res(t)
		acquire(t, srv, r0, "w1", 30)
		r := call(t, srv, "POST", lockPath(r0), acquireBody("attacker", 30))
		if r.status != 200 || r.json["acquired"] != false || r.json["resource"] != r0 {
			t.Fatalf("got %d %s, want 200 acquired:false resource %q", r.status, r.raw, r0)
		}
		if st := call(t, srv, "GET", lockPath(r0), ""); st.json["owner"] != "w1" {
			t.Fatalf("status after attack: got %s, want owner w1", st.raw)
		}
	})
	t.Run("ATK02_ReleaseOthersLock", func(t *testing.T) {
		r0 := res(t)
		acquire(t, srv, r0, "w1", 30)
		wantProblem(t, call(t, srv, "DELETE", lockPath(r0), ownerBody("attacker")), 403, "forbidden")
		if st := call(t, srv, "GET", lockPath(r0), ""); st.status != 200 || st.json["owner"] != "w1" {
			t.Fatalf("lock after forbidden release: got %d %s, want still held by w1", st.status, st.raw)
		}
	})
	t.Run("ATK03_TakeOverAfterExpiry", func(t *testing.T) {
		c := testenv.NewClock()
		s := testenv.Start(t, testenv.Options{Now: c.Now})
		r0 := res(t)
		old := acquire(t, s, r0, "w1", 5)
		c.Advance(4999 * time.Millisecond)
		if r := call(t, s, "POST", lockPath(r0), acquireBody("w2", 5)); r.json["acquired"] != false {
			t.Fatalf("1 ms before expiry: got %s, want acquired:false", r.raw)
		}
		c.Advance(time.Millisecond)
		taken := acquire(t, s, r0, "w2", 5)
		if token(t, taken) <= token(t, old) {
			t.Fatalf("takeover token %d, want > %d", token(t, taken), token(t, old))
		}
		wantProblem(t, call(t, s, "DELETE", lockPath(r0), ownerBody("w1")), 403, "forbidden")
	})
	t.Run("ATK04_RenewOthersLock", func(t *testing.T) {
		r0 := res(t)
		acquire(t, srv, r0, "w1", 30)
		wantProblem(t, call(t, srv, "POST", lockPath(r0)+"/renew", renewBody("attacker", 3600)), 403, "forbidden")
	})
	t.Run("ATK05_ZeroOrNegativeTTL", func(t *testing.T) {
		r0 := res(t)
		for _, ttl := range []int{0, -100, 86401} {
			wantProblem(t, call(t, srv, "POST", lockPath(r0), acquireBody("w1", ttl)), 422, "validation-failed")
		}
		wantProblem(t, call(t, srv, "GET", lockPath(r0), ""), 404, "not-found")
		acquire(t, srv, r0, "w1", 10)
		wantProblem(t, call(t, srv, "POST", lockPath(r0)+"/renew", renewBody("w1", 0)), 422, "validation-failed")
	})
	t.Run("ATK06_InjectionInResourceName", func(t *testing.T) {
		for _, name := range []string{
			"x'; DROP TABLE distributed_locks; --",
			"#{:owner} = :o OR attribute_exists(resource)",
			`:now) OR (attribute_exists(#r`,
		} {
			lock := acquire(t, srv, name+res(t), "w1", 30)
			if lock["resource"] != name+res(t) {
				t.Fatalf("got resource %q, want the literal %q", lock["resource"], name+res(t))
			}
			st := call(t, srv, "GET", lockPath(name+res(t)), "")
			if st.status != 200 || st.json["resource"] != name+res(t) {
				t.Fatalf("status of %q: got %d %s", name, st.status, st.raw)
			}
			if r := call(t, srv, "POST", lockPath(name+res(t)), acquireBody("w2", 30)); r.json["acquired"] != false {
				t.Fatalf("second owner on %q: got %s, want acquired:false", name, r.raw)
			}
		}
		// The same in the owner, which conditions compare.
		r0, evil := res(t), `x'; DROP TABLE locks; -- #o = :o OR attribute_exists(#r)`
		lock := acquire(t, srv, r0, evil, 30)
		if st := call(t, srv, "GET", lockPath(r0), ""); st.json["owner"] != evil {
			t.Fatalf("status: got owner %v, want the literal %q", st.json["owner"], evil)
		}
		for _, owner := range []string{"#o", ":o", "x'"} {
			if r := call(t, srv, "POST", lockPath(r0), acquireBody(owner, 30)); r.json["acquired"] != false {
				t.Fatalf("owner %q on a lock held by %q: got %s, want acquired:false", owner, evil, r.raw)
			}
		}
		if r := call(t, srv, "DELETE", lockPath(r0), ownerBody(evil, token(t, lock))); r.status != 204 {
			t.Fatalf("release by %q: got %d %s, want 204", evil, r.status, r.raw)
		}
	})
	t.Run("ATK07_BlankOwner", func(t *testing.T) {
		r0 := res(t)
		for _, body := range []string{
			`{"owner":"","ttl_seconds":30}`, `{"owner":"   ","ttl_seconds":30}`, `{"owner":"\t\n","ttl_seconds":30}`,
			`{"owner":"w\u0000x","ttl_seconds":30}`, `{"owner":"` + strings.Repeat("o", 256) + `","ttl_seconds":30}`,
			`{"owner":42,"ttl_seconds":30}`, `{"owner":null,"ttl_seconds":30}`, `{"ttl_seconds":30}`,
			`{"owner":"\udc00","ttl_seconds":30}`,
		} {
			r := call(t, srv, "POST", lockPath(r0), body)
			wantProblem(t, r, 422, "validation-failed")
		}
		acquire(t, srv, r0, "  w1\t", 30)
		if st := call(t, srv, "GET", lockPath(r0), ""); st.json["owner"] != "w1" {
			t.Fatalf("got owner %v, want stored trimmed \"w1\"", st.json["owner"])
		}
		wantProblem(t, call(t, srv, "DELETE", lockPath(r0), ownerBody(" ")), 422, "validation-failed")
		wantProblem(t, call(t, srv, "POST", lockPath(r0)+"/renew", renewBody("", 30)), 422, "validation-failed")
		if r := call(t, srv, "DELETE", lockPath(r0), ownerBody("w1 ")); r.status != 204 {
			t.Fatalf("release with padded owner: got %d %s, want 204", r.status, r.raw)
		}
	})
	t.Run("ATK08_NonIntegerTTL", func(t *testing.T) {
		r0 := res(t)
		for _, ttl := range []string{`"3600"`, `60.5`, `60.0`, `1e3`, `true`, `null`, `[30]`, `{}`, `99999999999999999999`} {
			r := call(t, srv, "POST", lockPath(r0), `{"owner":"w1","ttl_seconds":`+ttl+`}`)
			wantProblem(t, r, 422, "validation-failed")
			errs, _ := r.json["errors"].([]any)
			if len(errs) != 1 || errs[0].(map[string]any)["field"] != "ttl_seconds" {
				t.Errorf("ttl %s: got errors %v, want one about ttl_seconds", ttl, r.json["errors"])
			}
		}
		wantProblem(t, call(t, srv, "POST", lockPath(r0), `{"owner":"w1"}`), 422, "validation-failed")
		wantProblem(t, call(t, srv, "GET", lockPath(r0), ""), 404, "not-found")
	})
	t.Run("ATK09_SameOwnerReacquires", func(t *testing.T) {
		c := testenv.NewClock()
		s := testenv.Start(t, testenv.Options{Now: c.Now})
		r0 := res(t)
		first := acquire(t, s, r0, "w1", 10)
		c.Advance(3 * time.Second)
		again := acquire(t, s, r0, "w1", 10)
		if token(t, again) <= token(t, first) {
			t.Errorf("re-acquire token %d, want > %d", token(t, again), token(t, first))
		}
		want := c.Now().Add(10 * time.Second).UTC().Format("2006-01-02T15:04:05.000Z07:00")
		if again["expires_at"] != want || again["acquired_at"] == first["acquired_at"] {
			t.Errorf("re-acquire: got acquired_at %v expires_at %v, want a new acquired_at and expires_at %s", again["acquired_at"], again["expires_at"], want)
		}
	})
	t.Run("ATK11_GetAbsentExpiredReleased", func(t *testing.T) {
		c := testenv.NewClock()
		s := testenv.Start(t, testenv.Options{Now: c.Now})
		r0 := res(t)
		wantProblem(t, call(t, s, "GET", lockPath(r0), ""), 404, "not-found")
		acquire(t, s, r0, "w1", 2)
		c.Advance(2 * time.Second)
		wantProblem(t, call(t, s, "GET", lockPath(r0), ""), 404, "not-found")
		acquire(t, s, r0, "w1", 2)
		if r := call(t, s, "DELETE", lockPath(r0), ownerBody("w1")); r.status != 204 || r.raw != "" {
			t.Fatalf("release: got %d %q, want 204 with an empty body", r.status, r.raw)
		}
		wantProblem(t, call(t, s, "GET", lockPath(r0), ""), 404, "not-found")
	})
	t.Run("ATK12_LongOrOddResourceName", func(t *testing.T) {
		acquire(t, srv, strings.Repeat("r", 255), "w1", 30)
		for _, name := range []string{strings.Repeat("r", 256), strings.Repeat("é", 128), strings.Repeat("x", 64<<10), "a/b", "tab\there", "nul\x00"} {
			wantProblem(t, call(t, srv, "POST", lockPath(name), acquireBody("w1", 30)), 422, "validation-failed")
			wantProblem(t, call(t, srv, "GET", lockPath(name), ""), 422, "validation-failed")
		}
	})
}

// TestStatusCodes walks every outcome of the contract's status code table
// that TestAttacks does not already cover.
func TestStatusCodes(t *testing.T) {
	t.Parallel()
	clock := testenv.NewClock()
	srv := testenv.Start(t, testenv.Options{Now: clock.Now})
	r0 := res(t)
	lock := acquire(t, srv, r0, "w1", 30)
	tok := token(t, lock)

	st := call(t, srv, "GET", lockPath(r0), "")
	if st.status != 200 || st.json["owner"] != "w1" || token(t, st.json) != tok {
		t.Fatalf("status: got %d %s, want 200 with owner w1 and token %d", st.status, st.raw, tok)
	}
	for _, k := range []string{"resource", "owner", "fencing_token", "acquired_at", "expires_at"} {
		if _, ok := st.json[k]; !ok {
			t.Errorf("LOCK lacks %q: %s", k, st.raw)
		}
	}
	if _, err := time.Parse(time.RFC3339, st.json["expires_at"].(string)); err != nil || !strings.HasSuffix(st.json["expires_at"].(string), "Z") || len(st.json["expires_at"].(string)) != len("2006-01-02T15:04:05.000Z") {
		t.Errorf("expires_at %q: want RFC 3339 UTC with milliseconds", st.json["expires_at"])
	}

	clock.Advance(10 * time.Second)
	rn := call(t, srv, "POST", lockPath(r0)+"/renew", renewBody("w1", 60, tok))
	if rn.status != 200 || rn.json["renewed"] != true {
		t.Fatalf("renew: got %d %s, want 200 renewed", rn.status, rn.raw)
	}
	renewed := rn.json["lock"].(map[string]any)
	if token(t, renewed) != tok {
		t.Errorf("renew changed the token: got %d, want %d", token(t, renewed), tok)
	}
	if want := clock.Now().Add(60 * time.Second).UTC().Format("2006-01-02T15:04:05.000Z07:00"); renewed["expires_at"] != want {
		t.Errorf("renew: got expires_at %v, want %s", renewed["expires_at"], want)
	}
	wantProblem(t, call(t, srv, "POST", lockPath(r0)+"/renew", renewBody("w1", 60, tok-1)), 409, "stale-token")
	wantProblem(t, call(t, srv, "DELETE", lockPath(r0), ownerBody("w1", tok-1)), 409, "stale-token")
	wantProblem(t, call(t, srv, "DELETE", lockPath(r0), ownerBody("w2", tok)), 403, "forbidden")
	if r := call(t, srv, "DELETE", lockPath(r0), ownerBody("w1", tok)); r.status != 204 {
		t.Fatalf("release with the right token: got %d %s, want 204", r.status, r.raw)
	}
	wantProblem(t, call(t, srv, "DELETE", lockPath(r0), ownerBody("w1")), 404, "not-found")
	wantProblem(t, call(t, srv, "POST", lockPath(r0)+"/renew", renewBody("w1", 30)), 404, "not-found")

	// An expired lease cannot be renewed or released, even by its owner.
	acquire(t, srv, r0, "w1", 5)
	clock.Advance(5 * time.Second)
	wantProblem(t, call(t, srv, "POST", lockPath(r0)+"/renew", renewBody("w1", 30)), 404, "not-found")
	wantProblem(t, call(t, srv, "DELETE", lockPath(r0), ownerBody("w1")), 404, "not-found")

	t.Run("BodyErrors", func(t *testing.T) {
		cases := []struct {
			name, method, path, body string
			status                   int
			slug                     string
		}{
			{"MalformedJSON", "POST", lockPath(r0), `{"owner":`, 400, "invalid-json"},
			{"Array", "POST", lockPath(r0), `[1]`, 400, "invalid-json"},
			{"String", "POST", lockPath(r0), `"w1"`, 400, "invalid-json"},
			{"Null", "DELETE", lockPath(r0), `null`, 400, "invalid-json"},
			{"Empty", "POST", lockPath(r0) + "/renew", ``, 400, "invalid-json"},
			{"TwoObjects", "POST", lockPath(r0), `{"owner":"a","ttl_seconds":1}{}`, 400, "invalid-json"},
			{"TooLarge", "POST", lockPath(r0), `{"owner":"` + strings.Repeat("a", 16<<10) + `","ttl_seconds":1}`, 413, "payload-too-large"},
			{"UnknownMember", "POST", lockPath(r0), `{"owner":"w1","ttl_seconds":30,"ttl":5}`, 422, "validation-failed"},
			{"TypoInToken", "DELETE", lockPath(r0), `{"owner":"w1","fencing_tokn":5}`, 422, "validation-failed"},
			{"DuplicateMember", "POST", lockPath(r0), `{"owner":"w1","owner":"w2","ttl_seconds":30}`, 422, "validation-failed"},
			{"TokenString", "DELETE", lockPath(r0), `{"owner":"w1","fencing_token":"5"}`, 422, "validation-failed"},
			{"TokenZero", "POST", lockPath(r0) + "/renew", `{"owner":"w1","ttl_seconds":5,"fencing_token":0}`, 422, "validation-failed"},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				wantProblem(t, call(t, srv, tc.method, tc.path, tc.body), tc.status, tc.slug)
			})
		}
	})
	t.Run("UnmatchedRoute", func(t *testing.T) {
		for _, p := range []struct{ method, path string }{{"PUT", lockPath(r0)}, {"GET", "/locks/"}, {"GET", "/nope"}, {"GET", lockPath(r0) + "/renew"}} {
			r := call(t, srv, p.method, p.path, "")
			if r.status != 404 || r.raw != `{"message":"Not Found"}` {
				t.Errorf("%s %s: got %d %s, want 404 {\"message\":\"Not Found\"}", p.method, p.path, r.status, r.raw)
			}
		}
	})
}

// TestFencingMonotonic checks tokens grow across release, expiry, takeover,
// re-acquire and garbage collection of the record, and that renew keeps them.
func TestFencingMonotonic(t *testing.T) {
	t.Parallel()
	clock := testenv.NewClock()
	srv := testenv.Start(t, testenv.Options{Now: clock.Now, Retention: time.Hour})
	r0 := res(t)
	var last int64
	next := func(step string, lock map[string]any) {
		t.Helper()
		if tok := token(t, lock); tok <= last {
			t.Fatalf("%s: token %d, want > %d", step, tok, last)
		} else {
			last = tok
		}
	}
	next("first acquire", acquire(t, srv, r0, "w1", 5))
	if r := call(t, srv, "DELETE", lockPath(r0), ownerBody("w1", last)); r.status != 204 {
		t.Fatalf("release: %d %s", r.status, r.raw)
	}
	next("after release", acquire(t, srv, r0, "w1", 5))
	clock.Advance(5 * time.Second)
	next("takeover after expiry", acquire(t, srv, r0, "w2", 5))
	next("same-owner re-acquire", acquire(t, srv, r0, "w2", 5))
	rn := call(t, srv, "POST", lockPath(r0)+"/renew", renewBody("w2", 5))
	if got := token(t, rn.json["lock"].(map[string]any)); got != last {
		t.Fatalf("renew: token %d, want unchanged %d", got, last)
	}

	// Garbage collection: DynamoDB's TTL deletes the record some time after
	// expires_at + retention. A fresh counter must still beat every old token.
	clock.Advance(5*time.Second + time.Hour)
	_, err := srv.DB.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{
		TableName: aws.String(testenv.Table),
		Key:       map[string]types.AttributeValue{"resource": &types.AttributeValueMemberS{Value: r0}},
	})
	if err != nil {
		t.Fatal(err)
	}
	next("after garbage collection", acquire(t, srv, r0, "w3", 5))
}

// TestConcurrentAcquireOneWinner is ATK-10: 32 acquirers at once, exactly
// one wins.
func TestConcurrentAcquireOneWinner(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	r0 := res(t)
	const n = 32
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		mu      sync.Mutex
		winners []string
		held    int
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := "w" + string(rune('A'+i))
			<-start
			// 32 at once can keep dynalite past the store budget on a
			// loaded machine: a 503 is an unknown outcome, which a client
			// retries as the same owner (its own live lease, if the first
			// write landed, it takes again).
			r := call(t, srv, "POST", lockPath(r0), acquireBody(owner, 30))
			for try := 0; r.status == 503 && try < 5; try++ {
				time.Sleep(100 * time.Millisecond)
				r = call(t, srv, "POST", lockPath(r0), acquireBody(owner, 30))
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case r.status == 200 && r.json["acquired"] == true:
				winners = append(winners, owner)
			case r.status == 200 && r.json["acquired"] == false:
				held++
			default:
				t.Errorf("%s: got %d %s", owner, r.status, r.raw)
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(winners) != 1 || held != n-1 {
		t.Fatalf("got %d winners %v and %d held answers, want exactly 1 and %d", len(winners), winners, held, n-1)
	}
	if st := call(t, srv, "GET", lockPath(r0), ""); st.json["owner"] != winners[0] {
		t.Fatalf("status: got owner %v, want the winner %s", st.json["owner"], winners[0])
	}
}

// TestChurnNoOverlap has workers acquire and release one resource in a loop
// and checks that no two holds overlap and tokens grow with each hold.
func TestChurnNoOverlap(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	r0 := res(t)
	const workers, holdsEach = 6, 8
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		inside int
		tokens []int64
		holds  int
	)
	deadline := time.Now().Add(20 * time.Second)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := "worker-" + string(rune('0'+w))
			for got := 0; got < holdsEach && time.Now().Before(deadline); {
				r := call(t, srv, "POST", lockPath(r0), acquireBody(owner, 30))
				if r.json["acquired"] != true {
					time.Sleep(time.Millisecond)
					continue
				}
				tok := token(t, r.json["lock"].(map[string]any))
				mu.Lock()
				inside++
				if inside != 1 {
					t.Errorf("%s holds the lock together with another worker", owner)
				}
				tokens = append(tokens, tok)
				holds++
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				inside--
				mu.Unlock()
				if rel := call(t, srv, "DELETE", lockPath(r0), ownerBody(owner, tok)); rel.status != 204 {
					t.Errorf("%s release: got %d %s", owner, rel.status, rel.raw)
					return
				}
				got++
			}
		}()
	}
	wg.Wait()
	if holds != workers*holdsEach {
		t.Fatalf("got %d holds, want %d (deadline hit?)", holds, workers*holdsEach)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("hold %d has token %d after %d: tokens must grow in hold order", i, tokens[i], tokens[i-1])
		}
	}
}

// TestOneRequestPerOperation counts the DynamoDB requests the SDK sends:
// one per operation on every path the write itself decides, at most two
// when dynalite (unlike DynamoDB) does not return the old item.
func TestOneRequestPerOperation(t *testing.T) {
	t.Parallel()
	clock := testenv.NewClock()
	srv := testenv.Start(t, testenv.Options{Now: clock.Now})
	r0 := res(t)
	srv.Ops.Take()
	// A refused renew is explained by a read on dynalite's path; on the
	// path AWS takes (testenv.StoreOldItem) the refusal carries the item.
	refused := map[string]int{"UpdateItem": 1, "GetItem": 1}
	if srv.Store == testenv.StoreOldItem {
		refused = map[string]int{"UpdateItem": 1}
	}
	steps := []struct {
		name, method, path, body string
		want                     map[string]int
	}{
		{"AcquireFree", "POST", lockPath(r0), acquireBody("w1", 5), map[string]int{"UpdateItem": 1}},
		{"AcquireAgain", "POST", lockPath(r0), acquireBody("w1", 5), map[string]int{"UpdateItem": 1}},
		{"AcquireHeld", "POST", lockPath(r0), acquireBody("w2", 5), map[string]int{"UpdateItem": 1}},
		{"Status", "GET", lockPath(r0), "", map[string]int{"GetItem": 1}},
		{"Renew", "POST", lockPath(r0) + "/renew", renewBody("w1", 5), map[string]int{"UpdateItem": 1}},
		{"RenewForbidden", "POST", lockPath(r0) + "/renew", renewBody("w2", 5), refused},
		{"Release", "DELETE", lockPath(r0), ownerBody("w1"), map[string]int{"UpdateItem": 1}},
		{"StatusAbsent", "GET", lockPath(r0), "", map[string]int{"GetItem": 1}},
		{"AcquireAfterRelease", "POST", lockPath(r0), acquireBody("w2", 5), map[string]int{"UpdateItem": 1}},
		{"Takeover", "POST", lockPath(r0), acquireBody("w3", 5), map[string]int{"UpdateItem": 1}}, // after the clock moves, below
		{"Invalid", "POST", lockPath(r0), acquireBody("w3", 0), map[string]int{}},
	}
	for _, s := range steps {
		if s.name == "Takeover" {
			clock.Advance(5 * time.Second)
		}
		r := call(t, srv, s.method, s.path, s.body)
		if r.status >= 500 {
			t.Fatalf("%s: got %d %s", s.name, r.status, r.raw)
		}
		got := srv.Ops.Take()
		if len(got) != len(s.want) {
			t.Errorf("%s: got requests %v, want %v", s.name, got, s.want)
			continue
		}
		for op, n := range s.want {
			if got[op] != n {
				t.Errorf("%s: got requests %v, want %v", s.name, got, s.want)
			}
		}
	}
	b, _ := json.Marshal(steps[0].want)
	t.Logf("acquire sends %s", b)
}

// TestReleasedStaysReleased: a release is final even for requests stamped
// before it — a renew that arrives late, or a Lambda whose clock lags — and
// a released lock is free at once for everyone, whatever their clock says.
func TestReleasedStaysReleased(t *testing.T) {
	t.Parallel()
	clock := testenv.NewClock()
	fast := testenv.Start(t, testenv.Options{Now: clock.Now})
	lagging := testenv.Start(t, testenv.Options{Now: func() time.Time { return clock.Now().Add(-50 * time.Millisecond) }})
	r0 := res(t)
	tok := token(t, acquire(t, fast, r0, "w1", 30))
	if r := call(t, fast, "DELETE", lockPath(r0), ownerBody("w1", tok)); r.status != 204 {
		t.Fatalf("release: got %d %s", r.status, r.raw)
	}
	wantProblem(t, call(t, lagging, "POST", lockPath(r0)+"/renew", renewBody("w1", 30, tok)), 404, "not-found")
	wantProblem(t, call(t, lagging, "GET", lockPath(r0), ""), 404, "not-found")
	wantProblem(t, call(t, lagging, "DELETE", lockPath(r0), ownerBody("w1", tok)), 404, "not-found")
	if next := token(t, acquire(t, lagging, r0, "w2", 30)); next <= tok {
		t.Fatalf("acquire after release on a lagging clock: token %d, want > %d", next, tok)
	}
}
