package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

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
	// CtxAuth set to "none" removes the IAM authorizer (dev stacks only);
	// such a stack has no admin routes, and CtxAdmins must be empty.
	CtxAuth = "auth"
	// CtxAdmins lists the administrators' IAM principal ARNs, comma
	// separated (or a JSON list in cdk.json): an IAM role's ARN admits its
	// sessions. Empty (the default): no admin API.
	CtxAdmins = "admins"
	// CtxReserve set to "true" reserves concurrency for each function whose
	// api.Routes rows have a Reserve (acquire, wait, watch, renew,
	// release); the account needs a concurrency limit of their sum plus
	// api.UnreservedMinimum. ReserveFlag names the flags that override
	// each number.
	CtxReserve = "reserve"
	// CtxThrottle sets route throttles by operationId, OP=RATE:BURST,
	// comma separated (or a JSON list of them in cdk.json), read by
	// api.ParseThrottles as locald's -throttle is: e.g.
	// throttle=acquire=2000:2000,acquireWait=30:150.
	CtxThrottle = "throttle"
	// CtxAccountThrottle states API Gateway's account bucket in the
	// stack's Region, RATE:BURST (default 10000:5000; 2500:1250 in some
	// Regions), which the route throttles must fit.
	CtxAccountThrottle = "accountThrottle"
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
	// CtxRegions lists the Regions of a multi-Region deployment, comma
	// separated: three, or two with CtxWitness. The first holds the table's
	// stack; each gets the API and its functions.
	CtxRegions = "regions"
	// CtxWitness is the witness Region of a two-Region deployment.
	CtxWitness = "witness"
)

// MultiRegion is the multi-Region option: the table is a DynamoDB global
// table with multi-Region strong consistency, which DynamoDB allows in
// exactly three Regions: three replicas, or two and a witness.
type MultiRegion struct {
	// Regions hold a replica each and the API with its functions; the
	// first also holds the table's stack.
	Regions []string
	// Witness is the witness Region, or empty with three Regions.
	Witness string
}

// ReserveFlag is the context flag that overrides the reserved concurrency of
// function name under CtxReserve: reserveAcquire (the tries), reserveWait
// (the waiting acquires), reserveWatch, reserveRenew, reserveRelease.
func ReserveFlag(name string) string { return CtxReserve + constructID(name) }

// regionPattern is the form of an AWS Region name, e.g. eu-west-1.
var regionPattern = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-[0-9]+$`)

// MultiRegionFromContext reads CtxRegions and CtxWitness through get (see
// PropsFromContext). It returns nil without CtxRegions (one Region, the
// default). DynamoDB's Region sets (MRSC spans US, EU or AP Regions only)
// are checked by the CDK when the table is built.
func MultiRegionFromContext(get func(key string) any) (*MultiRegion, error) {
	str := func(key string) string {
		if v := get(key); v != nil {
			return strings.TrimSpace(fmt.Sprint(v))
		}
		return ""
	}
	regions, witness := str(CtxRegions), str(CtxWitness)
	if regions == "" {
		if witness != "" {
			return nil, fmt.Errorf("context %s=%q needs %s", CtxWitness, witness, CtxRegions)
		}
		return nil, nil
	}
	m := &MultiRegion{Witness: witness}
	seen := map[string]bool{}
	for _, r := range strings.Split(regions, ",") {
		r = strings.TrimSpace(r)
		if !regionPattern.MatchString(r) {
			return nil, fmt.Errorf("context %s=%q: %q is not a Region name such as us-east-1", CtxRegions, regions, r)
		}
		if seen[r] {
			return nil, fmt.Errorf("context %s=%q: %s twice", CtxRegions, regions, r)
		}
		seen[r] = true
		m.Regions = append(m.Regions, r)
	}
	if witness != "" {
		if !regionPattern.MatchString(witness) {
			return nil, fmt.Errorf("context %s=%q: not a Region name such as us-west-2", CtxWitness, witness)
		}
		if seen[witness] {
			return nil, fmt.Errorf("context %s=%q: the witness must be a Region without a replica", CtxWitness, witness)
		}
	}
	switch {
	case witness == "" && len(m.Regions) != 3, witness != "" && len(m.Regions) != 2:
		return nil, fmt.Errorf("context %s=%q %s=%q: multi-Region strong consistency needs exactly three Regions: "+
			"three replicas (regions=A,B,C) or two and a witness (regions=A,B witness=C)", CtxRegions, regions, CtxWitness, witness)
	}
	return m, nil
}

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
	if v := get(CtxAdmins); v != nil {
		list := fmt.Sprint(v)
		if l, ok := v.([]any); ok { // a JSON list in cdk.json
			parts := make([]string, len(l))
			for i, e := range l {
				parts[i] = fmt.Sprint(e)
			}
			list = strings.Join(parts, ",")
		}
		admins, err := api.ParseAdminPrincipals(list)
		if err != nil {
			return nil, "", fmt.Errorf("context %s: %w", CtxAdmins, err)
		}
		if props.AuthNone && len(admins) > 0 {
			return nil, "", fmt.Errorf("context %s=%q with %s=none: a stack without IAM auth deploys no admin routes "+
				"(its callers carry no identity to check); drop one of the two", CtxAdmins, list, CtxAuth)
		}
		props.Admins = admins
	}
	if err := reserveFromContext(str, props); err != nil {
		return nil, "", err
	}
	if v := get(CtxThrottle); v != nil {
		list := fmt.Sprint(v)
		if l, ok := v.([]any); ok { // a JSON list in cdk.json
			parts := make([]string, len(l))
			for i, e := range l {
				parts[i] = fmt.Sprint(e)
			}
			list = strings.Join(parts, ",")
		}
		t, err := api.ParseThrottles(list)
		if err != nil {
			return nil, "", fmt.Errorf("context %s=%q: %w", CtxThrottle, list, err)
		}
		props.Throttles = t
	}
	if v, ok := str(CtxAccountThrottle); ok {
		t, err := api.ParseThrottle(v)
		if err == nil && t.Rate == 0 {
			err = errors.New("rate 0: want a positive rate")
		}
		if err != nil {
			return nil, "", fmt.Errorf("context %s=%q: %w (the account's API Gateway limit, e.g. 10000:5000)", CtxAccountThrottle, v, err)
		}
		props.AccountThrottle = t
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
	if err := props.Validate(); err != nil {
		return nil, "", fmt.Errorf("context: %w", err)
	}
	return props, name, nil
}

// reserveFromContext reads CtxReserve and the ReserveFlag overrides into
// props.ReservedConcurrency: with reserve=true, each function whose
// api.Routes rows have a Reserve gets it, or its flag's positive integer.
// An override without reserve=true, or for a function that reserves
// nothing, is an error.
func reserveFromContext(str func(key string) (string, bool), props *LockServiceStackProps) error {
	reserve := false
	if v, ok := str(CtxReserve); ok {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("context %s=%q: want true or false", CtxReserve, v)
		}
		reserve = b
	}
	fns, err := Functions(api.Routes)
	if err != nil {
		return err
	}
	var errs []error
	for _, f := range fns {
		key := ReserveFlag(f.Name)
		v, set := str(key)
		n := f.Reserve()
		if set {
			var err error
			n, err = strconv.Atoi(strings.TrimSpace(v))
			switch {
			case f.Reserve() == 0:
				errs = append(errs, fmt.Errorf("context %s=%q: the %s function reserves no concurrency (api.Routes)", key, v, f.Name))
				continue
			case err != nil || n < 1:
				errs = append(errs, fmt.Errorf("context %s=%q: want a positive integer (reserved concurrent executions)", key, v))
				continue
			case !reserve:
				errs = append(errs, fmt.Errorf("context %s=%q needs %s=true", key, v, CtxReserve))
				continue
			}
		}
		if reserve && n > 0 {
			if props.ReservedConcurrency == nil {
				props.ReservedConcurrency = map[string]int{}
			}
			props.ReservedConcurrency[f.Name] = n
		}
	}
	return errors.Join(errs...)
}

// CheckAssets reports every function of routes (distinct Name) whose
// <dir>/<name>/bootstrap is missing, so a synth before `make build` fails
// with a hint, not a jsii trace.
func CheckAssets(dir string, routes []api.Route) error {
	fns, err := Functions(routes)
	if err != nil {
		return err
	}
	var errs []error
	for _, f := range fns {
		p := filepath.Join(dir, f.Name, "bootstrap")
		if st, err := os.Stat(p); err != nil || st.IsDir() {
			errs = append(errs, fmt.Errorf("missing function binary %s (run `make build` first)", p))
		}
	}
	return errors.Join(errs...)
}

// NewApp builds the whole CDK app: it reads the context flags, creates the
// stacks and applies the cdk-nag AwsSolutions checks, which write
// AwsSolutions-<stack>-NagReport.csv into the app's output folder on synth.
// By default that is one lock service stack; with CtxRegions it is a
// GlobalTableStack in the first Region (<name>-Table) and a lock service
// stack in each Region (<name>-<region>) that uses the table's replica
// there, in that order. appProps may be nil; tests set Outdir and Context
// through it.
func NewApp(appProps *awscdk.AppProps) (app awscdk.App, stacks []awscdk.Stack, err error) {
	app = awscdk.NewApp(appProps)
	get := func(key string) any { return app.Node().TryGetContext(jsii.String(key)) }
	props, name, err := PropsFromContext(get)
	if err != nil {
		return nil, nil, err
	}
	multi, err := MultiRegionFromContext(get)
	if err != nil {
		return nil, nil, err
	}
	if err := CheckAssets(props.AssetDir, props.Routes()); err != nil {
		return nil, nil, err
	}
	const description = "Serverless distributed lock service (github.com/ft288/locks)"
	props.Description = jsii.String(description)
	if multi == nil {
		stacks = append(stacks, NewLockServiceStack(app, name, props))
	} else {
		// The CDK reports a configuration DynamoDB would refuse (Regions
		// of different Region sets) by panicking through jsii.
		defer func() {
			if r := recover(); r != nil {
				app, stacks, err = nil, nil, fmt.Errorf("multi-Region table: %v", r)
			}
		}()
		tableName := name + "-Locks"
		tableStack := NewGlobalTableStack(app, name+"-Table", &GlobalTableStackProps{
			StackProps: awscdk.StackProps{
				Env:         &awscdk.Environment{Region: jsii.String(multi.Regions[0])},
				Description: jsii.String(description + ": the global table"),
			},
			TableName:            tableName,
			Replicas:             multi.Regions[1:],
			Witness:              multi.Witness,
			RemovalPolicyDestroy: props.RemovalPolicyDestroy,
		})
		stacks = append(stacks, tableStack)
		for _, region := range multi.Regions {
			p := *props
			p.TableName = tableName
			p.Env = &awscdk.Environment{Region: jsii.String(region)}
			p.Description = jsii.String(description + " in " + region)
			s := NewLockServiceStack(app, name+"-"+region, &p)
			// Deploy order only: the stacks share nothing but the
			// table's name, so there is no cross-Region reference.
			s.AddStackDependency(tableStack, jsii.String("the functions use the table's replica in "+region))
			stacks = append(stacks, s)
		}
	}
	awscdk.Aspects_Of(app).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{
		Reports: jsii.Bool(true),
		Verbose: jsii.Bool(true),
	}), nil)
	return app, stacks, nil
}
