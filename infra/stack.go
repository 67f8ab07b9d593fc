package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2authorizers"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2integrations"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/ft288/locks/api"
)

// Defaults for LockServiceStackProps fields left at their zero value, and the
// values handed to every function through its environment.
const (
	// DefaultAssetDir is where `make build` leaves <name>/bootstrap for each
	// function, relative to the repository root (where `cdk synth` runs).
	DefaultAssetDir = "build/lambda"
	// DefaultThrottleRate is the steady-state request rate (requests per
	// second) of the API's default stage.
	DefaultThrottleRate = 100
	// DefaultThrottleBurst is the burst capacity of the API's default stage.
	DefaultThrottleBurst = 200
	// MaxTTLSeconds is the longest lease a client may ask for (one day).
	MaxTTLSeconds = 86400
	// TombstoneRetentionSeconds is how long a released or expired lock item
	// keeps its fencing counter before DynamoDB's TTL may delete it (a week).
	TombstoneRetentionSeconds = 604800
	// MaxWaitSeconds is the longest wait_seconds an acquire may ask for.
	MaxWaitSeconds = 20
	// MaxLockDelaySeconds is the longest lock_delay_seconds an acquire may
	// ask for (five minutes).
	MaxLockDelaySeconds = 300
)

// DynamoDBActions lists, per function (api.Route.Name), exactly the
// DynamoDB actions that function's handler calls. Each function's role is
// granted these on the lock table and nothing else: acquire (the tries),
// renew and release are conditional UpdateItems (one each; a semaphore's
// try a few), and against DynamoDB itself a failed condition returns the
// old item, which tells 404 from 403/409 and shows a semaphore's slots, so
// they never read (locklogic.Config.OldItemOnFailure); a waiting acquire
// (wait) also watches a held lock and its queue with GetItem; status is a
// GetItem; a watch reads with GetItem and records an expiry it answers with
// one conditional UpdateItem (locklogic: a watched expiry is final).
// The admin function (GET /admin/locks, DELETE /admin/locks/{resource})
// lists with Scan and force-releases with one conditional UpdateItem; it is
// the only role that may Scan. The semaphore rows run on the function of
// the same job and need nothing more: a semaphore acquire's second write
// uses the first one's old item (DynamoDB returns it), never a read. A
// lock set's function (lockset) makes the lock's acquire, renew and release
// writes, one per name; its waiting twin (locksetwait) also watches the
// name that refused the set with GetItem.
var DynamoDBActions = map[string][]string{
	"acquire": {"dynamodb:UpdateItem"},
	"wait":    {"dynamodb:GetItem", "dynamodb:UpdateItem"},
	"renew":   {"dynamodb:UpdateItem"},
	"release": {"dynamodb:UpdateItem"},
	"status":  {"dynamodb:GetItem"},
	"watch":   {"dynamodb:GetItem", "dynamodb:UpdateItem"},
	"admin":   {"dynamodb:Scan", "dynamodb:UpdateItem"},

	"lockset":     {"dynamodb:UpdateItem"},
	"locksetwait": {"dynamodb:GetItem", "dynamodb:UpdateItem"},
}

// FunctionEnvironment lists, per function, the environment it gets on top
// of the one every function gets (see newLockFunction): the functions that
// grant leases read the longest lock-delay. Those whose routes wait
// (api.Route.Waits: wait, watch) also get MAX_WAIT_SECONDS, spelled out
// though it is the default, since their timeout (api.WaitTimeout) is sized
// for it; the others never wait and do not read it.
var FunctionEnvironment = map[string]map[string]string{
	"acquire": {"MAX_LOCK_DELAY_SECONDS": fmt.Sprint(MaxLockDelaySeconds)},
	"wait":    {"MAX_LOCK_DELAY_SECONDS": fmt.Sprint(MaxLockDelaySeconds)},

	"lockset":     {"MAX_LOCK_DELAY_SECONDS": fmt.Sprint(MaxLockDelaySeconds)},
	"locksetwait": {"MAX_LOCK_DELAY_SECONDS": fmt.Sprint(MaxLockDelaySeconds)},
}

// Function is one Lambda function of the service: its Name (the folder
// functions/<Name> and build/lambda/<Name>) and the api.Routes rows it
// serves, which share its timeout, its reserved concurrency and whether
// they are admin routes.
type Function struct {
	Name   string
	Routes []api.Route
}

// Timeout is the function's timeout, the one of each of its rows.
func (f Function) Timeout() time.Duration { return f.Routes[0].Timeout }

// Reserve is the function's reserved concurrency under -c reserve=true
// (api.Route.Reserve of each of its rows; 0: none).
func (f Function) Reserve() int { return f.Routes[0].Reserve }

// Admin reports whether the function serves the admin routes.
func (f Function) Admin() bool { return f.Routes[0].Admin }

// Waits reports whether the function's routes may wait for a whole round
// (api.Route.Waits).
func (f Function) Waits() bool { return f.Routes[0].Waits }

// Functions groups routes by Name, in the order each Name first appears:
// one Lambda function per distinct Name, serving every row of that Name.
// Rows of one function must agree on the timeout, the reserved concurrency
// and Admin.
func Functions(routes []api.Route) ([]Function, error) {
	var fns []Function
	index := map[string]int{}
	for _, r := range routes {
		i, ok := index[r.Name]
		if !ok {
			index[r.Name] = len(fns)
			fns = append(fns, Function{Name: r.Name, Routes: []api.Route{r}})
			continue
		}
		if r.Timeout != fns[i].Timeout() {
			return nil, fmt.Errorf("routes %q and %q of function %q: timeouts %s and %s differ",
				fns[i].Routes[0].Key(), r.Key(), r.Name, fns[i].Timeout(), r.Timeout)
		}
		if r.Reserve != fns[i].Reserve() {
			return nil, fmt.Errorf("routes %q and %q of function %q: reserved concurrency %d and %d differ",
				fns[i].Routes[0].Key(), r.Key(), r.Name, fns[i].Reserve(), r.Reserve)
		}
		if r.Admin != fns[i].Admin() {
			return nil, fmt.Errorf("routes %q and %q of function %q: one is an admin route, the other not",
				fns[i].Routes[0].Key(), r.Key(), r.Name)
		}
		if r.Waits != fns[i].Waits() {
			return nil, fmt.Errorf("routes %q and %q of function %q: one waits, the other not",
				fns[i].Routes[0].Key(), r.Key(), r.Name)
		}
		fns[i].Routes = append(fns[i].Routes, r)
	}
	return fns, nil
}

// keys returns the route keys of f's rows, e.g. "GET /admin/locks, DELETE
// /admin/locks/{resource}".
func (f Function) keys() string {
	keys := make([]string, len(f.Routes))
	for i, r := range f.Routes {
		keys[i] = r.Key()
	}
	return strings.Join(keys, ", ")
}

// LockServiceStackProps configures NewLockServiceStack. Zero values mean the
// production defaults: IAM auth on every route, no admin API, no reserved
// concurrency, a table of the stack, retained table and logs, the route
// table's throttles (each within API Gateway's default account bucket), the
// Default* stage throttling and assets from DefaultAssetDir.
type LockServiceStackProps struct {
	awscdk.StackProps
	// AssetDir holds <name>/bootstrap (linux/arm64) for each function.
	AssetDir string
	// AuthNone drops the IAM authorizer from every route (dev stacks only:
	// anyone who knows the URL can then take and release locks). Such a
	// stack has no admin routes: Admins must be empty.
	AuthNone bool
	// Admins lists the IAM principal ARNs allowed to call the admin routes
	// (api.ParseAdminPrincipals), handed to the admin function as
	// ADMIN_PRINCIPALS. Empty: the admin API is off (no admin function, no
	// admin routes, no AdminInvokeArns output).
	Admins []string
	// ReservedConcurrency is the reserved concurrency of functions, by
	// Name (-c reserve=true fills it from api.Routes' Reserve); a function
	// absent from it reserves none. Each value must be positive.
	ReservedConcurrency map[string]int
	// Throttles overrides route throttles by operationId
	// (api.Route.OperationID; -c throttle=OP=RATE:BURST,…, read by
	// api.ParseThrottles); the other routes keep api.Routes' Throttle.
	Throttles map[string]api.Throttle
	// AccountThrottle is API Gateway's bucket for the account in the
	// stack's Region (api.AccountThrottle when zero): no route's rate or
	// burst may exceed its own (api.CheckAccountBucket); their sum may,
	// since the account's bucket caps the routes together.
	AccountThrottle api.Throttle
	// ThrottleRate is the default stage's steady-state requests per second.
	ThrottleRate float64
	// ThrottleBurst is the default stage's burst capacity.
	ThrottleBurst float64
	// RemovalPolicyDestroy deletes the table and log groups with the stack
	// (dev stacks only); by default they are retained.
	RemovalPolicyDestroy bool
	// TableName, when set, names an existing table in the stack's Region
	// (a replica of the global table that a GlobalTableStack creates) for
	// the functions to use; the stack then creates no table of its own.
	TableName string
}

// MaxAdminPrincipalsBytes bounds ADMIN_PRINCIPALS: Lambda allows 4 KB of
// environment per function, shared with the other variables.
const MaxAdminPrincipalsBytes = 3000

// Routes returns the api.Routes rows the stack deploys: every row, but the
// admin rows only with Admins (and never with AuthNone, whose callers carry
// no identity to check).
func (p LockServiceStackProps) Routes() []api.Route {
	var out []api.Route
	for _, r := range api.Routes {
		if r.Admin && (len(p.Admins) == 0 || p.AuthNone) {
			continue
		}
		out = append(out, r)
	}
	return out
}

// Validate reports the combinations the stack cannot build: administrators
// on a stack without IAM auth, a malformed or too long administrator list,
// reserved concurrency that is not positive or names no function of the
// stack, a throttle for an operation the stack does not deploy, and route
// throttles above the account's API Gateway bucket (api.CheckAccountBucket).
func (p LockServiceStackProps) Validate() error {
	var errs []error
	if p.AuthNone && len(p.Admins) > 0 {
		errs = append(errs, errors.New("administrators with auth=none: a stack without IAM auth has no admin routes "+
			"(its callers carry no identity to check); deploy with IAM auth or without admins"))
	}
	if len(p.Admins) > 0 {
		joined := strings.Join(p.Admins, ",")
		if got, err := api.ParseAdminPrincipals(joined); err != nil {
			errs = append(errs, fmt.Errorf("administrators: %w", err))
		} else if len(got) != len(p.Admins) {
			errs = append(errs, fmt.Errorf("administrators %q: one ARN per entry, no commas", p.Admins))
		}
		if len(joined) > MaxAdminPrincipalsBytes {
			errs = append(errs, fmt.Errorf("administrators: %d bytes of ARNs, more than %d fit in the admin function's "+
				"environment: list roles rather than their users or sessions", len(joined), MaxAdminPrincipalsBytes))
		}
	}
	fns, err := Functions(p.Routes())
	if err != nil {
		return err
	}
	for name, n := range p.ReservedConcurrency {
		if !slices.ContainsFunc(fns, func(f Function) bool { return f.Name == name }) {
			errs = append(errs, fmt.Errorf("reserved concurrency for %q: the stack has no such function", name))
		}
		if n < 1 {
			errs = append(errs, fmt.Errorf("reserved concurrency for %q: got %d, want a positive integer", name, n))
		}
	}
	routes := p.Routes()
	for _, op := range slices.Sorted(maps.Keys(p.Throttles)) {
		if !slices.ContainsFunc(routes, func(r api.Route) bool { return r.OperationID() == op }) {
			errs = append(errs, fmt.Errorf("throttle for %q: the stack deploys no route of that operation "+
				"(the admin routes only with admins)", op))
		}
	}
	account := p.AccountThrottle
	if account == (api.Throttle{}) {
		account = api.AccountThrottle
	}
	if err := api.CheckAccountBucket(routes, p.Throttles, account); err != nil {
		errs = append(errs, fmt.Errorf("route throttles: %w (set routes with -c %s=OP=RATE:BURST,…; if AWS raised the "+
			"account's limit, state it with -c %s=RATE:BURST; see docs/operations.md, Capacity)", err, CtxThrottle, CtxAccountThrottle))
	}
	return errors.Join(errs...)
}

// withDefaults returns a copy of p with zero fields set to their defaults.
func (p LockServiceStackProps) withDefaults() LockServiceStackProps {
	if p.AssetDir == "" {
		p.AssetDir = DefaultAssetDir
	}
	if p.ThrottleRate == 0 {
		p.ThrottleRate = DefaultThrottleRate
	}
	if p.ThrottleBurst == 0 {
		p.ThrottleBurst = DefaultThrottleBurst
	}
	return p
}

// NewLockServiceStack creates the lock service: one on-demand DynamoDB table
// (or, with props.TableName, the replica of a global table in the stack's
// Region), one Lambda function per distinct Name of the deployed api.Routes
// rows (props.Routes: the admin ones only with administrators) with a role
// that may call only the DynamoDB actions in DynamoDBActions and the
// reserved concurrency of props, an HTTP API with one route per row and an
// IAM authorizer on every route, a default stage with a default throttle,
// each route's own throttle (api.Route.Throttle) and JSON access logs, a
// CloudWatch dashboard and alarms. A nil props means all defaults; props
// that fail Validate panic.
func NewLockServiceStack(scope constructs.Construct, id string, props *LockServiceStackProps) awscdk.Stack {
	var p LockServiceStackProps
	if props != nil {
		p = *props
	}
	p = p.withDefaults()
	if err := p.Validate(); err != nil {
		panic("infra: " + err.Error())
	}
	fns, err := Functions(p.Routes())
	if err != nil {
		panic("infra: " + err.Error())
	}

	stack := awscdk.NewStack(scope, &id, &p.StackProps)

	removal := awscdk.RemovalPolicy_RETAIN
	if p.RemovalPolicyDestroy {
		removal = awscdk.RemovalPolicy_DESTROY
	}

	var table awsdynamodb.ITable
	if p.TableName != "" {
		// The replica in this stack's Region, by name: its ARN is built in
		// this stack, so there is no cross-Region reference to resolve.
		table = awsdynamodb.TableV2_FromTableName(stack, jsii.String("Locks"), jsii.String(p.TableName))
	} else {
		table = awsdynamodb.NewTable(stack, jsii.String("Locks"), &awsdynamodb.TableProps{
			PartitionKey: &awsdynamodb.Attribute{
				Name: jsii.String("resource"),
				Type: awsdynamodb.AttributeType_STRING,
			},
			BillingMode:         awsdynamodb.BillingMode_PAY_PER_REQUEST,
			TimeToLiveAttribute: jsii.String("ttl"),
			PointInTimeRecoverySpecification: &awsdynamodb.PointInTimeRecoverySpecification{
				PointInTimeRecoveryEnabled: jsii.Bool(true),
			},
			// Deletion protection guards a retained table against deletion
			// outside CloudFormation too; dev stacks must be able to drop it.
			DeletionProtection: jsii.Bool(!p.RemovalPolicyDestroy),
			RemovalPolicy:      removal,
		})
	}

	httpAPI := awsapigatewayv2.NewHttpApi(stack, jsii.String("Api"), &awsapigatewayv2.HttpApiProps{
		Description: jsii.String("Distributed lock service (one route per api.Routes row)"),
		// The default stage is created below so it can carry throttling and
		// access logs.
		CreateDefaultStage: jsii.Bool(false),
	})

	var authorizer awsapigatewayv2.IHttpRouteAuthorizer
	if !p.AuthNone {
		// SigV4-signed requests only; the caller's IAM identity reaches the
		// handler as requestContext.authorizer.iam and owns the lock.
		authorizer = awsapigatewayv2authorizers.NewHttpIamAuthorizer()
	}

	obs := newObservability(stack, *stack.StackName())
	var routes []constructs.IDependable
	for _, f := range fns {
		actions, ok := DynamoDBActions[f.Name]
		if !ok {
			panic(fmt.Sprintf("infra: function %q has no entry in DynamoDBActions", f.Name))
		}
		fn := newLockFunction(stack, f, table, actions, removal, p)
		for _, route := range f.Routes {
			// A function that serves one row names its route after itself
			// (AcquireRoute); rows that share one are told apart by their
			// operation (ListLocksRoute, AcquireSemaphoreRoute). A lock
			// row's operation is its function's name, so its logical ID
			// stays AcquireRoute when semaphore rows join the function.
			rid := constructID(route.Name)
			if len(f.Routes) > 1 {
				rid = constructID(route.OperationID())
			}
			r := awsapigatewayv2.NewHttpRoute(stack, jsii.String(rid+"Route"), &awsapigatewayv2.HttpRouteProps{
				HttpApi:  httpAPI,
				RouteKey: awsapigatewayv2.HttpRouteKey_With(jsii.String(route.Path), awsapigatewayv2.HttpMethod(route.Method)),
				Integration: awsapigatewayv2integrations.NewHttpLambdaIntegration(
					jsii.String(rid+"Integration"), fn,
					&awsapigatewayv2integrations.HttpLambdaIntegrationProps{
						PayloadFormatVersion: awsapigatewayv2.PayloadFormatVersion_VERSION_2_0(),
					}),
				Authorizer: authorizer,
			})
			routes = append(routes, r)
		}
		obs.addFunction(f, fn)
	}

	stage, accessLogs := newDefaultStage(stack, httpAPI, p, removal, routes)
	obs.addThrottled(accessLogs, p.Routes())
	obs.addAPIAndTable(httpAPI, table)
	obs.addServiceAlarms(fns)
	obs.newDashboard(fns, httpAPI, table)

	if p.AuthNone {
		cdknag.NagSuppressions_AddStackSuppressions(stack, &[]*cdknag.NagPackSuppression{{
			Id: jsii.String("AwsSolutions-APIG4"),
			Reason: jsii.String("Deployed with context auth=none: a throwaway dev stack without an authorizer by " +
				"explicit choice; production stacks keep the IAM authorizer on every route."),
		}}, jsii.Bool(false))
	}

	awscdk.NewCfnOutput(stack, jsii.String("ApiUrl"), &awscdk.CfnOutputProps{
		Description: jsii.String("Base URL of the lock API, e.g. <ApiUrl>locks/<resource>"),
		Value:       stage.Url(),
	})
	awscdk.NewCfnOutput(stack, jsii.String("TableName"), &awscdk.CfnOutputProps{
		Description: jsii.String("DynamoDB table that holds the locks"),
		Value:       table.TableName(),
	})
	lockARNs, adminARNs := InvokeARNs(p.Routes(), func(method, path string) string {
		return *httpAPI.ArnForExecuteApi(jsii.String(method), jsii.String(path), jsii.String("*"))
	})
	awscdk.NewCfnOutput(stack, jsii.String("LockUserInvokeArns"), &awscdk.CfnOutputProps{
		Description: jsii.String("Resources of execute-api:Invoke for lock users: the lock routes, none of /admin"),
		Value:       awscdk.Fn_Join(jsii.String(","), jsii.Strings(lockARNs...)),
	})
	if len(adminARNs) > 0 { // the admin API is on
		awscdk.NewCfnOutput(stack, jsii.String("AdminInvokeArns"), &awscdk.CfnOutputProps{
			Description: jsii.String("Resources of execute-api:Invoke for administrators: the /admin routes (list, force release)"),
			Value:       awscdk.Fn_Join(jsii.String(","), jsii.Strings(adminARNs...)),
		})
	}
	return stack
}

// InvokeARNs returns the execute-api resources that allow calling the lock
// routes (lock) and the admin routes (admin) of routes, one per distinct
// method and path, built by arn(method, path) with each {param} of the path
// as "*". Each names its method: in an IAM resource "*" matches "/" too, so
// API_ID/*/*/locks/* would also match API_ID/$default/DELETE/admin/locks/x,
// the force release.
func InvokeARNs(routes []api.Route, arn func(method, path string) string) (lock, admin []string) {
	seen := map[string]bool{}
	for _, r := range routes {
		parts := strings.Split(r.Path, "/")
		for i, s := range parts {
			if strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}") {
				parts[i] = "*"
			}
		}
		path := strings.Join(parts, "/")
		if seen[r.Method+" "+path] {
			continue
		}
		seen[r.Method+" "+path] = true
		if r.Admin {
			admin = append(admin, arn(r.Method, path))
		} else {
			lock = append(lock, arn(r.Method, path))
		}
	}
	return lock, admin
}

// newLockFunction creates function f, with its own log group, a role that
// can write only to that log group and call only actions on table, p's
// reserved concurrency for it and, for the admin function, p's
// administrators.
func newLockFunction(stack awscdk.Stack, f Function, table awsdynamodb.ITable, actions []string,
	removal awscdk.RemovalPolicy, p LockServiceStackProps) awslambda.Function {
	id := constructID(f.Name)

	logGroup := awslogs.NewLogGroup(stack, jsii.String(id+"Logs"), &awslogs.LogGroupProps{
		Retention:     awslogs.RetentionDays_ONE_MONTH,
		RemovalPolicy: removal,
	})

	// An explicit role keeps the AWSLambdaBasicExecutionRole managed policy
	// (logs on every log group in the account) off the function.
	role := awsiam.NewRole(stack, jsii.String(id+"Role"), &awsiam.RoleProps{
		AssumedBy:   awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil),
		Description: jsii.String(fmt.Sprintf("Lock service %s function (%s)", f.Name, f.keys())),
		InlinePolicies: &map[string]awsiam.PolicyDocument{
			"DynamoDB": awsiam.NewPolicyDocument(&awsiam.PolicyDocumentProps{
				Statements: &[]awsiam.PolicyStatement{awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
					Actions:   jsii.Strings(actions...),
					Resources: jsii.Strings(*table.TableArn()),
				})},
			}),
			"Logs": awsiam.NewPolicyDocument(&awsiam.PolicyDocumentProps{
				Statements: &[]awsiam.PolicyStatement{awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
					Actions:   jsii.Strings("logs:CreateLogStream", "logs:PutLogEvents"),
					Resources: jsii.Strings(*logGroup.LogGroupArn()),
				})},
			}),
		},
	})

	env := map[string]*string{
		"TABLE_NAME":                  table.TableName(),
		"MAX_TTL_SECONDS":             jsii.String(fmt.Sprint(MaxTTLSeconds)),
		"TOMBSTONE_RETENTION_SECONDS": jsii.String(fmt.Sprint(TombstoneRetentionSeconds)),
		// DynamoDB returns the old item with a failed condition, so
		// renew and release never read to explain one: their roles
		// have no GetItem (DynamoDBActions).
		"DYNAMODB_RETURNS_OLD_ITEM": jsii.String("true"),
		// The namespace of the Embedded Metric Format lines the handler
		// logs; the dashboard and alarms read it (observability.go).
		"METRICS_NAMESPACE": stack.StackName(),
	}
	for k, v := range FunctionEnvironment[f.Name] {
		env[k] = jsii.String(v)
	}
	if f.Waits() {
		env["MAX_WAIT_SECONDS"] = jsii.String(fmt.Sprint(MaxWaitSeconds))
	}
	if f.Admin() {
		// The admin handler refuses every caller not listed here.
		env[api.AdminPrincipalsEnv] = jsii.String(strings.Join(p.Admins, ","))
	}
	// Reserved concurrency: a floor for the quick functions that waiting
	// acquires cannot take, a cap (and a floor) for wait and watch; none
	// by default (see api/capacity.go).
	var reserved *float64
	if n := p.ReservedConcurrency[f.Name]; n > 0 {
		reserved = jsii.Number(float64(n))
	}
	// The route table's timeout: 5 s for the quick routes, more for the
	// routes that wait and for a listing (below API Gateway's 30 s).
	timeout := awscdk.Duration_Seconds(jsii.Number(f.Timeout().Seconds()))
	fn := awslambda.NewFunction(stack, jsii.String(id+"Function"), &awslambda.FunctionProps{
		Description:   jsii.String("Lock service: " + f.keys()),
		Runtime:       awslambda.Runtime_PROVIDED_AL2023(),
		Architecture:  awslambda.Architecture_ARM_64(),
		Handler:       jsii.String("bootstrap"),
		Code:          awslambda.Code_FromAsset(jsii.String(filepath.Join(p.AssetDir, f.Name)), nil),
		MemorySize:    jsii.Number(128),
		Timeout:       timeout,
		LoggingFormat: awslambda.LoggingFormat_JSON,
		LogGroup:      logGroup,
		Tracing:       awslambda.Tracing_ACTIVE,
		Role:          role,
		Environment:   &env,

		ReservedConcurrentExecutions: reserved,
	})

	// Tracing ACTIVE adds xray:PutTraceSegments and xray:PutTelemetryRecords
	// on "*" to the role's default policy.
	cdknag.NagSuppressions_AddResourceSuppressions(role, &[]*cdknag.NagPackSuppression{{
		Id: jsii.String("AwsSolutions-IAM5"),
		Reason: jsii.String("X-Ray PutTraceSegments/PutTelemetryRecords support no resource-level permissions, " +
			"so active tracing needs Resource \"*\"; every DynamoDB and Logs statement names one ARN."),
		AppliesTo: &[]interface{}{"Resource::*"},
	}}, jsii.Bool(true))
	return fn
}

// accessLogFormat is the JSON line the default stage writes per request.
// principal is the SigV4 caller that the IAM authorizer accepted.
func accessLogFormat() string {
	fields := map[string]string{
		"requestId":          "$context.requestId",
		"requestTime":        "$context.requestTime",
		"routeKey":           "$context.routeKey",
		"status":             "$context.status",
		"responseLength":     "$context.responseLength",
		"integrationLatency": "$context.integrationLatency",
		"integrationStatus":  "$context.integrationStatus",
		"integrationError":   "$context.integrationErrorMessage",
		"principal":          "$context.identity.userArn",
		"accountId":          "$context.identity.accountId",
		"sourceIp":           "$context.identity.sourceIp",
		"authorizerError":    "$context.authorizer.error",
	}
	b, err := json.Marshal(fields) // map keys marshal sorted: a stable template
	if err != nil {
		panic(err) // a map of strings always marshals
	}
	return string(b)
}

// newDefaultStage creates the $default stage with a default throttle, the
// throttle of each of p's routes, and JSON access logs to a log group of its
// own, which it returns. The stage depends on routes: API Gateway refuses route settings for
// a route key it does not have yet.
func newDefaultStage(stack awscdk.Stack, httpAPI awsapigatewayv2.HttpApi, p LockServiceStackProps,
	removal awscdk.RemovalPolicy, routes []constructs.IDependable) (awsapigatewayv2.HttpStage, awslogs.LogGroup) {
	accessLogs := awslogs.NewLogGroup(stack, jsii.String("ApiAccessLogs"), &awslogs.LogGroupProps{
		Retention:     awslogs.RetentionDays_ONE_MONTH,
		RemovalPolicy: removal,
	})
	stage := awsapigatewayv2.NewHttpStage(stack, jsii.String("DefaultStage"), &awsapigatewayv2.HttpStageProps{
		HttpApi:    httpAPI,
		StageName:  jsii.String("$default"),
		AutoDeploy: jsii.Bool(true),
		Throttle: &awsapigatewayv2.ThrottleSettings{
			RateLimit:  jsii.Number(p.ThrottleRate),
			BurstLimit: jsii.Number(p.ThrottleBurst),
		},
	})
	// Access logs go on the L1 stage: the L2 prop takes an IAccessLogSettings
	// interface that Go code would have to implement as a jsii object.
	cfnStage := stage.Node().DefaultChild().(awsapigatewayv2.CfnStage)
	cfnStage.SetAccessLogSettings(&awsapigatewayv2.CfnStage_AccessLogSettingsProperty{
		DestinationArn: accessLogs.LogGroupArn(),
		Format:         jsii.String(accessLogFormat()),
	})
	// Each route's own throttle (see api/capacity.go), or the context
	// flag's: the routes that wait admit few requests, so waiters cannot
	// crowd out holders, and the quick ones many. RouteSettings is a JSON
	// map by route key; a route's settings replace the stage default for
	// that route.
	settings := map[string]any{}
	for _, r := range p.Routes() {
		t := r.ThrottleOf(p.Throttles)
		settings[r.Key()] = map[string]any{
			"ThrottlingRateLimit":  t.Rate,
			"ThrottlingBurstLimit": t.Burst,
		}
	}
	cfnStage.SetRouteSettings(settings)
	stage.Node().AddDependency(routes...)
	return stage, accessLogs
}

// constructID turns a route name such as "acquire" into "Acquire".
func constructID(name string) string {
	if name == "" {
		return name
	}
	return strings.ToUpper(name[:1]) + name[1:]
}
