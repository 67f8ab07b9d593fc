package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"

	"github.com/ft288/locks/api"
)

func TestPropsFromContext(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		ctx       map[string]any
		want      LockServiceStackProps
		wantStack string
		wantErr   string
	}{
		{name: "Defaults", ctx: nil,
			want: LockServiceStackProps{AssetDir: DefaultAssetDir}, wantStack: DefaultStackName},
		{name: "DevFlagsFromCommandLine",
			ctx:       map[string]any{"auth": "none", "destroy": "true", "throttleRate": "10", "throttleBurst": "20"},
			want:      LockServiceStackProps{AssetDir: DefaultAssetDir, AuthNone: true, RemovalPolicyDestroy: true, ThrottleRate: 10, ThrottleBurst: 20},
			wantStack: DefaultStackName},
		{name: "JSONValuesFromCdkJSON",
			ctx:       map[string]any{"destroy": true, "throttleRate": float64(5), "throttleBurst": float64(7.5)},
			want:      LockServiceStackProps{AssetDir: DefaultAssetDir, RemovalPolicyDestroy: true, ThrottleRate: 5, ThrottleBurst: 7.5},
			wantStack: DefaultStackName},
		{name: "AuthIAMExplicit", ctx: map[string]any{"auth": "iam", "destroy": "false"},
			want: LockServiceStackProps{AssetDir: DefaultAssetDir}, wantStack: DefaultStackName},
		{name: "AssetDirAndStackName", ctx: map[string]any{"assetDir": "/tmp/x", "stackName": "LockService-dev"},
			want: LockServiceStackProps{AssetDir: "/tmp/x"}, wantStack: "LockService-dev"},
		{name: "Admins", ctx: map[string]any{"admins": "arn:aws:iam::111122223333:role/ops, arn:aws:iam::111122223333:user/alice"},
			want: LockServiceStackProps{AssetDir: DefaultAssetDir,
				Admins: []string{"arn:aws:iam::111122223333:role/ops", "arn:aws:iam::111122223333:user/alice"}},
			wantStack: DefaultStackName},
		{name: "AdminsAsJSONList", ctx: map[string]any{"admins": []any{"arn:aws:iam::111122223333:role/ops"}},
			want:      LockServiceStackProps{AssetDir: DefaultAssetDir, Admins: []string{"arn:aws:iam::111122223333:role/ops"}},
			wantStack: DefaultStackName},
		{name: "AdminsEmptyIsOff", ctx: map[string]any{"admins": ""},
			want: LockServiceStackProps{AssetDir: DefaultAssetDir}, wantStack: DefaultStackName},
		{name: "AuthNoneWithoutAdmins", ctx: map[string]any{"auth": "none", "admins": " "},
			want: LockServiceStackProps{AssetDir: DefaultAssetDir, AuthNone: true}, wantStack: DefaultStackName},
		{name: "Reserve", ctx: map[string]any{"reserve": "true"},
			want: LockServiceStackProps{AssetDir: DefaultAssetDir,
				ReservedConcurrency: map[string]int{"acquire": 50, "wait": 100, "renew": 50, "release": 20, "watch": 50, "lockset": 30, "locksetwait": 30}},
			wantStack: DefaultStackName},
		{name: "ReserveOverridden", ctx: map[string]any{"reserve": true, "reserveAcquire": "40", "reserveRenew": float64(30), "reserveWait": "200"},
			want: LockServiceStackProps{AssetDir: DefaultAssetDir,
				ReservedConcurrency: map[string]int{"acquire": 40, "wait": 200, "renew": 30, "release": 20, "watch": 50, "lockset": 30, "locksetwait": 30}},
			wantStack: DefaultStackName},
		{name: "Throttles", ctx: map[string]any{"throttle": "acquire=2000:2000, acquireWait=30:150", "accountThrottle": "12000:6000"},
			want: LockServiceStackProps{AssetDir: DefaultAssetDir, AccountThrottle: api.Throttle{Rate: 12000, Burst: 6000},
				Throttles: map[string]api.Throttle{"acquire": {Rate: 2000, Burst: 2000}, "acquireWait": {Rate: 30, Burst: 150}}},
			wantStack: DefaultStackName},
		{name: "ThrottlesAsJSONList", ctx: map[string]any{"throttle": []any{"status=500:500", "renewSemaphore=10:20"}},
			want: LockServiceStackProps{AssetDir: DefaultAssetDir,
				Throttles: map[string]api.Throttle{"status": {Rate: 500, Burst: 500}, "renewSemaphore": {Rate: 10, Burst: 20}}},
			wantStack: DefaultStackName},
		{name: "ThrottlesLoweredForASmallRegion", ctx: map[string]any{"accountThrottle": "2500:1250",
			"throttle": "acquire=300:300,acquireSemaphore=200:200,status=300:300,semaphoreStatus=200:200,release=300:300," +
				"releaseSemaphore=200:200,renew=500:500,renewSemaphore=300:300,acquireRead=20:20,acquireWrite=20:20," +
				"rwlockStatus=20:20,releaseRWLock=20:20,renewRWLock=20:20"},
			want: LockServiceStackProps{AssetDir: DefaultAssetDir, AccountThrottle: api.Throttle{Rate: 2500, Burst: 1250},
				Throttles: map[string]api.Throttle{"acquire": {Rate: 300, Burst: 300}, "acquireSemaphore": {Rate: 200, Burst: 200},
					"status": {Rate: 300, Burst: 300}, "semaphoreStatus": {Rate: 200, Burst: 200}, "release": {Rate: 300, Burst: 300},
					"releaseSemaphore": {Rate: 200, Burst: 200}, "renew": {Rate: 500, Burst: 500}, "renewSemaphore": {Rate: 300, Burst: 300},
					"acquireRead": {Rate: 20, Burst: 20}, "acquireWrite": {Rate: 20, Burst: 20}, "rwlockStatus": {Rate: 20, Burst: 20},
					"releaseRWLock": {Rate: 20, Burst: 20}, "renewRWLock": {Rate: 20, Burst: 20}}},
			wantStack: DefaultStackName},
		{name: "ReserveFalse", ctx: map[string]any{"reserve": "false"},
			want: LockServiceStackProps{AssetDir: DefaultAssetDir}, wantStack: DefaultStackName},
		{name: "ErrAdminsNotARN", ctx: map[string]any{"admins": "alice"}, wantErr: `"alice" is not an IAM or STS principal ARN`},
		{name: "ErrAdminsRoleSessionWithoutSession", ctx: map[string]any{"admins": "arn:aws:sts::111122223333:assumed-role/ops"},
			wantErr: "without a session"},
		{name: "ErrAdminsWithAuthNone", ctx: map[string]any{"auth": "none", "admins": "arn:aws:iam::111122223333:role/ops"},
			wantErr: "auth=none"},
		{name: "ErrAdminsTooLong", ctx: map[string]any{"admins": strings.Repeat("arn:aws:iam::111122223333:role/an-operator-role-name-0,", 60) +
			"arn:aws:iam::111122223333:role/last"}, wantErr: "environment"},
		{name: "ErrReserveNotBool", ctx: map[string]any{"reserve": "yes"}, wantErr: "reserve"},
		{name: "ErrReserveNotInteger", ctx: map[string]any{"reserve": "true", "reserveAcquire": "many"}, wantErr: "reserveAcquire"},
		{name: "ErrReserveFraction", ctx: map[string]any{"reserve": "true", "reserveRenew": float64(2.5)}, wantErr: "reserveRenew"},
		{name: "ErrReserveZero", ctx: map[string]any{"reserve": "true", "reserveRelease": "0"}, wantErr: "positive integer"},
		{name: "ErrReserveNegative", ctx: map[string]any{"reserve": "true", "reserveAcquire": "-5"}, wantErr: "positive integer"},
		{name: "ErrReserveWithoutFlag", ctx: map[string]any{"reserveAcquire": "50"}, wantErr: "needs reserve=true"},
		{name: "ErrReserveOfStatus", ctx: map[string]any{"reserve": "true", "reserveStatus": "5"}, wantErr: "reserves no concurrency"},
		{name: "ErrAuthUnknown", ctx: map[string]any{"auth": "cognito"}, wantErr: "auth"},
		{name: "ErrDestroyNotBool", ctx: map[string]any{"destroy": "yes please"}, wantErr: "destroy"},
		{name: "ErrThrottleRateNotNumber", ctx: map[string]any{"throttleRate": "fast"}, wantErr: "throttleRate"},
		{name: "ErrThrottleBurstNotPositive", ctx: map[string]any{"throttleBurst": "0"}, wantErr: "throttleBurst"},
		{name: "ErrThrottleSyntax", ctx: map[string]any{"throttle": "acquire=2000"}, wantErr: `context throttle="acquire=2000": "acquire=2000": "2000": want RATE:BURST`},
		{name: "ErrThrottleOperation", ctx: map[string]any{"throttle": "wait=10:10"}, wantErr: `"wait" is no route's operation`},
		{name: "ErrThrottleBurst", ctx: map[string]any{"throttle": "status=10:0"}, wantErr: `burst "0"`},
		{name: "ErrThrottleAdminWithoutAdmins", ctx: map[string]any{"throttle": "listLocks=1:1"}, wantErr: `throttle for "listLocks": the stack deploys no route`},
		{name: "ErrThrottleAboveAccount", ctx: map[string]any{"throttle": "status=12000:3000"},
			wantErr: "rate 12000 requests/s is above the account's API Gateway limit of 10000 requests/s"},
		{name: "ErrBurstAboveAccount", ctx: map[string]any{"throttle": "renew=100:6000"}, wantErr: "burst 6000 is above the account's API Gateway burst of 5000"},
		{name: "ErrSmallRegion", ctx: map[string]any{"accountThrottle": "2500:1250", "throttle": "acquire=3000:1000"},
			wantErr: "(acquire): rate 3000 requests/s is above the account's API Gateway limit of 2500 requests/s"},
		{name: "ErrAccountThrottleSyntax", ctx: map[string]any{"accountThrottle": "10000"}, wantErr: "accountThrottle"},
		{name: "ErrAccountThrottleZero", ctx: map[string]any{"accountThrottle": "0:5000"}, wantErr: "positive rate"},
		{name: "ErrReserveWaitWithoutFlag", ctx: map[string]any{"reserveWait": "50"}, wantErr: "reserveWait=\"50\" needs reserve=true"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, stack, err := PropsFromContext(func(k string) any { return tt.ctx[k] })
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got error %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("got error %v, want nil", err)
			}
			if !reflect.DeepEqual(*got, tt.want) {
				t.Errorf("got props %+v, want %+v", *got, tt.want)
			}
			if stack != tt.wantStack {
				t.Errorf("got stack name %q, want %q", stack, tt.wantStack)
			}
		})
	}
}

func TestCheckAssets(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		skip    string // route whose bootstrap is not written
		asDir   bool   // write bootstrap as a folder instead of a file
		wantErr bool
	}{
		{name: "OK"},
		{name: "ErrMissing", skip: api.Routes[len(api.Routes)-1].Name, wantErr: true},
		{name: "ErrFolderNotFile", skip: api.Routes[0].Name, asDir: true, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			for _, r := range api.Routes {
				p := filepath.Join(dir, r.Name, "bootstrap")
				if r.Name == tt.skip {
					if tt.asDir {
						if err := os.MkdirAll(p, 0o755); err != nil {
							t.Fatal(err)
						}
					}
					continue
				}
				writeBootstrap(t, p)
			}
			err := CheckAssets(dir, api.Routes)
			if tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), filepath.Join(tt.skip, "bootstrap")) {
					t.Fatalf("got error %v, want one naming %s/bootstrap", err, tt.skip)
				}
				return
			}
			if err != nil {
				t.Fatalf("got error %v, want nil", err)
			}
		})
	}
}

// writeBootstrap writes a placeholder executable at path.
func writeBootstrap(tb testing.TB, path string) {
	tb.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		tb.Fatal(err)
	}
}

func TestMultiRegionFromContext(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		ctx     map[string]any
		want    *MultiRegion
		wantErr string
	}{
		{name: "OneRegionByDefault", ctx: nil, want: nil},
		{name: "ThreeReplicas", ctx: map[string]any{"regions": "us-east-1,us-east-2,us-west-2"},
			want: &MultiRegion{Regions: []string{"us-east-1", "us-east-2", "us-west-2"}}},
		{name: "TwoReplicasAndWitness", ctx: map[string]any{"regions": " eu-west-1, eu-west-2 ", "witness": "eu-central-1"},
			want: &MultiRegion{Regions: []string{"eu-west-1", "eu-west-2"}, Witness: "eu-central-1"}},
		{name: "ErrTwoWithoutWitness", ctx: map[string]any{"regions": "us-east-1,us-east-2"}, wantErr: "exactly three"},
		{name: "ErrThreeAndWitness", ctx: map[string]any{"regions": "us-east-1,us-east-2,us-west-2", "witness": "us-west-1"},
			wantErr: "exactly three"},
		{name: "ErrOneRegion", ctx: map[string]any{"regions": "us-east-1", "witness": "us-east-2"}, wantErr: "exactly three"},
		{name: "ErrWitnessAlone", ctx: map[string]any{"witness": "us-west-2"}, wantErr: "needs regions"},
		{name: "ErrTwice", ctx: map[string]any{"regions": "us-east-1,us-east-1,us-west-2"}, wantErr: "twice"},
		{name: "ErrWitnessIsReplica", ctx: map[string]any{"regions": "us-east-1,us-east-2", "witness": "us-east-2"},
			wantErr: "without a replica"},
		{name: "ErrNotARegion", ctx: map[string]any{"regions": "us-east-1,,us-west-2"}, wantErr: "not a Region"},
		{name: "ErrWitnessNotARegion", ctx: map[string]any{"regions": "us-east-1,us-east-2", "witness": "Oregon"},
			wantErr: "not a Region"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := MultiRegionFromContext(func(k string) any { return tt.ctx[k] })
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got error %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("got error %v, want nil", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestFunctionsGroupsRoutes(t *testing.T) {
	t.Parallel()
	fns, err := Functions(api.Routes)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range fns {
		names = append(names, f.Name)
		for _, r := range f.Routes {
			if r.Name != f.Name {
				t.Errorf("function %s holds route %q of %s", f.Name, r.Key(), r.Name)
			}
		}
	}
	if want := []string{"acquire", "wait", "status", "release", "renew", "watch", "admin", "lockset", "locksetwait"}; !reflect.DeepEqual(names, want) {
		t.Errorf("got functions %v, want %v", names, want)
	}
	for _, tt := range []struct {
		name    string
		second  api.Route // the second row of function a
		wantErr string
	}{
		{name: "ErrTimeouts", second: api.Route{Name: "a", Method: "POST", Path: "/x", Timeout: 2 * time.Second}, wantErr: "timeouts"},
		{name: "ErrReserves", second: api.Route{Name: "a", Method: "POST", Path: "/x", Timeout: time.Second, Reserve: 5},
			wantErr: "reserved concurrency"},
		{name: "ErrAdminAndNot", second: api.Route{Name: "a", Method: "POST", Path: "/x", Timeout: time.Second, Admin: true},
			wantErr: "admin route"},
		{name: "ErrWaitsAndNot", second: api.Route{Name: "a", Method: "POST", Path: "/x", Timeout: time.Second, Waits: true},
			wantErr: "one waits"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Functions([]api.Route{{Name: "a", Method: "GET", Path: "/x", Timeout: time.Second}, tt.second})
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("got error %v, want one about %s", err, tt.wantErr)
			}
		})
	}
}

// TestDeployedRoutes: the admin rows are deployed only with
// administrators, and never without IAM auth.
func TestDeployedRoutes(t *testing.T) {
	t.Parallel()
	admins := []string{"arn:aws:iam::111122223333:role/ops"}
	tests := []struct {
		name      string
		props     LockServiceStackProps
		wantAdmin bool
	}{
		{name: "Default", props: LockServiceStackProps{}},
		{name: "Admins", props: LockServiceStackProps{Admins: admins}, wantAdmin: true},
		{name: "AuthNone", props: LockServiceStackProps{AuthNone: true}},
		{name: "AuthNoneWithAdmins", props: LockServiceStackProps{AuthNone: true, Admins: admins}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var lock, admin int
			for _, r := range tt.props.Routes() {
				if r.Admin {
					admin++
				} else {
					lock++
				}
			}
			// 6 lock routes and their 6 semaphore rows, 4 lock set rows,
			// 8 read/write lock rows; 2 + 2 + 2 admin rows.
			if lock != 24 || (admin == 6) != tt.wantAdmin || (admin != 0 && admin != 6) {
				t.Errorf("got %d lock and %d admin routes, want 24 and %v", lock, admin, tt.wantAdmin)
			}
		})
	}
}

// TestValidate: the props NewLockServiceStack refuses (it panics on them;
// PropsFromContext reports them as errors).
func TestValidate(t *testing.T) {
	t.Parallel()
	ops := []string{"arn:aws:iam::111122223333:role/ops"}
	tests := []struct {
		name    string
		props   LockServiceStackProps
		wantErr string
	}{
		{name: "Defaults", props: LockServiceStackProps{}},
		{name: "AdminsAndReserve", props: LockServiceStackProps{Admins: ops,
			ReservedConcurrency: map[string]int{"acquire": 1, "renew": 2, "release": 3}}},
		{name: "ErrAdminsWithAuthNone", props: LockServiceStackProps{AuthNone: true, Admins: ops}, wantErr: "auth=none"},
		{name: "ErrAdminNotARN", props: LockServiceStackProps{Admins: []string{"ops"}}, wantErr: "not an IAM or STS"},
		{name: "ErrAdminWithComma", props: LockServiceStackProps{Admins: []string{ops[0] + "," + ops[0]}}, wantErr: "no commas"},
		{name: "ErrReserveUnknownFunction", props: LockServiceStackProps{ReservedConcurrency: map[string]int{"acquirer": 5}},
			wantErr: `"acquirer"`},
		{name: "ErrReserveAbsentAdmin", props: LockServiceStackProps{ReservedConcurrency: map[string]int{"admin": 5}},
			wantErr: "no such function"},
		{name: "ErrReserveZero", props: LockServiceStackProps{ReservedConcurrency: map[string]int{"renew": 0}},
			wantErr: "positive"},
		{name: "AdminThrottleWithAdmins", props: LockServiceStackProps{Admins: ops, Throttles: map[string]api.Throttle{"listLocks": {Rate: 1, Burst: 1}}}},
		{name: "ErrThrottleUnknownOperation", props: LockServiceStackProps{Throttles: map[string]api.Throttle{"lock": {Rate: 1, Burst: 1}}},
			wantErr: `"lock"`},
		{name: "SmallRegionDefaults", props: LockServiceStackProps{AccountThrottle: api.Throttle{Rate: 2500, Burst: 1250}}},
		{name: "ErrAccountBucket", props: LockServiceStackProps{AccountThrottle: api.Throttle{Rate: 800, Burst: 5000}},
			wantErr: "above the account's API Gateway limit of 800"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.props.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("got error %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("got error %v, want one mentioning %q", err, tt.wantErr)
			}
		})
	}
}

// TestNewAppRejects: bad capacity and administrator flags fail the synth
// with the flag's name, before any stack is built.
func TestNewAppRejects(t *testing.T) {
	dir := t.TempDir()
	for _, r := range api.Routes {
		writeBootstrap(t, filepath.Join(dir, r.Name, "bootstrap"))
	}
	tests := []struct {
		name    string
		ctx     map[string]any
		wantErr string
	}{
		{name: "ReserveNotInteger", ctx: map[string]any{"reserve": "true", "reserveRenew": "lots"}, wantErr: "reserveRenew"},
		{name: "ReserveOverrideAlone", ctx: map[string]any{"reserveRelease": "5"}, wantErr: "needs reserve=true"},
		{name: "AdminsWithAuthNone", ctx: map[string]any{"auth": "none", "admins": "arn:aws:iam::111122223333:role/ops"},
			wantErr: "auth=none"},
		{name: "AdminsNotARNs", ctx: map[string]any{"admins": "ops,alice"}, wantErr: "admins"},
		{name: "ThrottleBadValue", ctx: map[string]any{"throttle": "acquire=fast:10"}, wantErr: `context throttle="acquire=fast:10"`},
		{name: "ThrottleAboveAccount", ctx: map[string]any{"accountThrottle": "2500:1250", "throttle": "renew=3000:1000"},
			wantErr: "(renew): rate 3000 requests/s is above the account's API Gateway limit of 2500"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.ctx["assetDir"] = dir
			out := filepath.Join(dir, "out-"+tt.name)
			_, stacks, err := NewApp(&awscdk.AppProps{Outdir: jsii.String(out), Context: &tt.ctx})
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || stacks != nil {
				t.Fatalf("got %d stacks, error %v; want an error mentioning %q", len(stacks), err, tt.wantErr)
			}
		})
	}
}
