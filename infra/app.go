package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/ft288/locks/api"
)

// DefaultStackName is the stack's id and CloudFormation name unless the
// stackName context flag names another (one per dev stack).
const DefaultStackName = "LockService"

// Context flags read by NewApp, set with `cdk synth -c key=value` or in
// cdk.json's "context".
const (
	// CtxAuth set to "none" removes the IAM authorizer (dev stacks only).
	CtxAuth = "auth"
	// CtxDestroy set to "true" deletes the table and logs with the stack.
	CtxDestroy = "destroy"
	// CtxThrottleRate is the default stage's requests per second.
	CtxThrottleRate = "throttleRate"
	// CtxThrottleBurst is the default stage's burst capacity.
	CtxThrottleBurst = "throttleBurst"
	// CtxAssetDir overrides DefaultAssetDir.
	CtxAssetDir = "assetDir"
	// CtxStackName overrides DefaultStackName.
	CtxStackName = "stackName"
)

// PropsFromContext turns context flags, looked up through get (which returns
// nil for an unset key), into stack props and the stack name. Values may be
// strings (from -c on the command line) or JSON values (from cdk.json).
func PropsFromContext(get func(key string) any) (*LockServiceStackProps, string, error) {
	str := func(key string) (string, bool) {
		switch v := get(key).(type) {
		case nil:
			return "", false
		case string:
			return v, true
		default:
			return fmt.Sprint(v), true
		}
	}
	props := &LockServiceStackProps{AssetDir: DefaultAssetDir}
	if v, ok := str(CtxAuth); ok {
		switch v {
		case "none":
			props.AuthNone = true
		case "iam":
		default:
			return nil, "", fmt.Errorf("context %s=%q: want iam or none", CtxAuth, v)
		}
	}
	if v, ok := str(CtxDestroy); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, "", fmt.Errorf("context %s=%q: want true or false", CtxDestroy, v)
		}
		props.RemovalPolicyDestroy = b
	}
	for _, f := range []struct {
		key string
		dst *float64
	}{{CtxThrottleRate, &props.ThrottleRate}, {CtxThrottleBurst, &props.ThrottleBurst}} {
		v, ok := str(f.key)
		if !ok {
			continue
		}
		n, err := strconv.ParseFloat(v, 64)
		if err != nil || n <= 0 {
			return nil, "", fmt.Errorf("context %s=%q: want a positive number", f.key, v)
		}
		*f.dst = n
	}
	if v, ok := str(CtxAssetDir); ok && v != "" {
		props.AssetDir = v
	}
	name := DefaultStackName
	if v, ok := str(CtxStackName); ok && v != "" {
		name = v
	}
	return props, name, nil
}

// CheckAssets reports every api.Routes row whose <dir>/<name>/bootstrap is
// missing, so a synth before `make build` fails with a hint, not a jsii trace.
func CheckAssets(dir string) error {
	var errs []error
	for _, r := range api.Routes {
		p := filepath.Join(dir, r.Name, "bootstrap")
		if st, err := os.Stat(p); err != nil || st.IsDir() {
			errs = append(errs, fmt.Errorf("missing function binary %s (run `make build` first)", p))
		}
	}
	return errors.Join(errs...)
}

// NewApp builds the whole CDK app: it reads the context flags, creates the
// lock service stack and applies the cdk-nag AwsSolutions checks, which write
// AwsSolutions-<stack>-NagReport.csv into the app's output folder on synth.
// appProps may be nil; tests set Outdir and Context through it.
func NewApp(appProps *awscdk.AppProps) (awscdk.App, awscdk.Stack, error) {
	app := awscdk.NewApp(appProps)
	props, name, err := PropsFromContext(func(key string) any {
		return app.Node().TryGetContext(jsii.String(key))
	})
	if err != nil {
		return nil, nil, err
	}
	if err := CheckAssets(props.AssetDir); err != nil {
		return nil, nil, err
	}
	props.Description = jsii.String("Serverless distributed lock service (github.com/ft288/locks)")
	stack := NewLockServiceStack(app, name, props)
	awscdk.Aspects_Of(app).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{
		Reports: jsii.Bool(true),
		Verbose: jsii.Bool(true),
	}), nil)
	return app, stack, nil
}
