package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

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
		{name: "ErrAuthUnknown", ctx: map[string]any{"auth": "cognito"}, wantErr: "auth"},
		{name: "ErrDestroyNotBool", ctx: map[string]any{"destroy": "yes please"}, wantErr: "destroy"},
		{name: "ErrThrottleRateNotNumber", ctx: map[string]any{"throttleRate": "fast"}, wantErr: "throttleRate"},
		{name: "ErrThrottleBurstNotPositive", ctx: map[string]any{"throttleBurst": "0"}, wantErr: "throttleBurst"},
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
			if *got != tt.want {
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
			err := CheckAssets(dir)
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
	if want := []string{"acquire", "status", "release", "renew", "admin"}; !reflect.DeepEqual(names, want) {
		t.Errorf("got functions %v, want %v", names, want)
	}
	_, err = Functions([]api.Route{
		{Name: "a", Method: "GET", Path: "/x", Timeout: time.Second},
		{Name: "a", Method: "POST", Path: "/x", Timeout: 2 * time.Second},
	})
	if err == nil || !strings.Contains(err.Error(), "timeouts") {
		t.Errorf("rows of one function with two timeouts: got error %v, want one about timeouts", err)
	}
}
