package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2authorizers"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2integrations"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
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
)

// DynamoDBActions lists, per route name (api.Route.Name), exactly the
// DynamoDB actions that function's handler calls. Each function's role is
// granted these on the lock table and nothing else: acquire, renew and
// release are one conditional UpdateItem each (against DynamoDB itself a
// failed condition returns the old item, which tells 404 from 403/409, so
// they never read: locklogic.Config.OldItemOnFailure); an acquire with
// wait_seconds also watches a held lock with GetItem; status is a GetItem.
var DynamoDBActions = map[string][]string{
	"acquire": {"dynamodb:GetItem", "dynamodb:UpdateItem"},
	"renew":   {"dynamodb:UpdateItem"},
	"release": {"dynamodb:UpdateItem"},
	"status":  {"dynamodb:GetItem"},
}

// LockServiceStackProps configures NewLockServiceStack. Zero values mean the
// production defaults: IAM auth on every route, retained table and logs, the
// Default* throttling and assets from DefaultAssetDir.
type LockServiceStackProps struct {
	awscdk.StackProps
	// AssetDir holds <name>/bootstrap (linux/arm64) for each api.Routes row.
	AssetDir string
	// AuthNone drops the IAM authorizer from every route (dev stacks only:
	// anyone who knows the URL can then take and release locks).
	AuthNone bool
	// ThrottleRate is the default stage's steady-state requests per second.
	ThrottleRate float64
	// ThrottleBurst is the default stage's burst capacity.
	ThrottleBurst float64
	// RemovalPolicyDestroy deletes the table and log groups with the stack
	// (dev stacks only); by default they are retained.
	RemovalPolicyDestroy bool
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

// NewLockServiceStack creates the lock service: one on-demand DynamoDB table,
// one Lambda function per api.Routes row with a role that may call only the
// DynamoDB actions in DynamoDBActions, an HTTP API with an IAM authorizer on
// every route, a throttled default stage with JSON access logs, and alarms.
// A nil props means all defaults.
func NewLockServiceStack(scope constructs.Construct, id string, props *LockServiceStackProps) awscdk.Stack {
	var p LockServiceStackProps
	if props != nil {
		p = *props
	}
	p = p.withDefaults()

	stack := awscdk.NewStack(scope, &id, &p.StackProps)

	removal := awscdk.RemovalPolicy_RETAIN
	if p.RemovalPolicyDestroy {
		removal = awscdk.RemovalPolicy_DESTROY
	}

	table := awsdynamodb.NewTable(stack, jsii.String("Locks"), &awsdynamodb.TableProps{
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

	for _, route := range api.Routes {
		actions, ok := DynamoDBActions[route.Name]
		if !ok {
			panic(fmt.Sprintf("infra: route %q has no entry in DynamoDBActions", route.Name))
		}
		fn := newLockFunction(stack, route, table, actions, removal, p.AssetDir)
		awsapigatewayv2.NewHttpRoute(stack, jsii.String(constructID(route.Name)+"Route"), &awsapigatewayv2.HttpRouteProps{
			HttpApi:  httpAPI,
			RouteKey: awsapigatewayv2.HttpRouteKey_With(jsii.String(route.Path), awsapigatewayv2.HttpMethod(route.Method)),
			Integration: awsapigatewayv2integrations.NewHttpLambdaIntegration(
				jsii.String(constructID(route.Name)+"Integration"), fn,
				&awsapigatewayv2integrations.HttpLambdaIntegrationProps{
					PayloadFormatVersion: awsapigatewayv2.PayloadFormatVersion_VERSION_2_0(),
				}),
			Authorizer: authorizer,
		})
		addFunctionAlarms(stack, route.Name, fn)
	}

	stage := newDefaultStage(stack, httpAPI, p, removal)
	addAPIAlarms(stack, httpAPI, table)

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
	return stack
}

// newLockFunction creates the function that serves route, with its own log
// group and a role that can write only to that log group and call only
// actions on table.
func newLockFunction(stack awscdk.Stack, route api.Route, table awsdynamodb.Table, actions []string,
	removal awscdk.RemovalPolicy, assetDir string) awslambda.Function {
	id := constructID(route.Name)

	logGroup := awslogs.NewLogGroup(stack, jsii.String(id+"Logs"), &awslogs.LogGroupProps{
		Retention:     awslogs.RetentionDays_ONE_MONTH,
		RemovalPolicy: removal,
	})

	// An explicit role keeps the AWSLambdaBasicExecutionRole managed policy
	// (logs on every log group in the account) off the function.
	role := awsiam.NewRole(stack, jsii.String(id+"Role"), &awsiam.RoleProps{
		AssumedBy:   awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil),
		Description: jsii.String(fmt.Sprintf("Lock service %s function (%s %s)", route.Name, route.Method, route.Path)),
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
	}
	if route.Name == "acquire" {
		// Spelled out, though it is the default: the function's timeout
		// (api.AcquireTimeout) is sized for it.
		env["MAX_WAIT_SECONDS"] = jsii.String(fmt.Sprint(MaxWaitSeconds))
	}
	// The route table's timeout: 5 s for one store call, more for an
	// acquire that may wait (below API Gateway's 30 s).
	timeout := awscdk.Duration_Seconds(jsii.Number(route.Timeout.Seconds()))
	fn := awslambda.NewFunction(stack, jsii.String(id+"Function"), &awslambda.FunctionProps{
		Description:   jsii.String(fmt.Sprintf("Lock service: %s %s", route.Method, route.Path)),
		Runtime:       awslambda.Runtime_PROVIDED_AL2023(),
		Architecture:  awslambda.Architecture_ARM_64(),
		Handler:       jsii.String("bootstrap"),
		Code:          awslambda.Code_FromAsset(jsii.String(filepath.Join(assetDir, route.Name)), nil),
		MemorySize:    jsii.Number(128),
		Timeout:       timeout,
		LoggingFormat: awslambda.LoggingFormat_JSON,
		LogGroup:      logGroup,
		Tracing:       awslambda.Tracing_ACTIVE,
		Role:          role,
		Environment:   &env,
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

// newDefaultStage creates the $default stage with throttling and JSON access
// logs to a log group of its own.
func newDefaultStage(stack awscdk.Stack, httpAPI awsapigatewayv2.HttpApi, p LockServiceStackProps,
	removal awscdk.RemovalPolicy) awsapigatewayv2.HttpStage {
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
	return stage
}

// addFunctionAlarms alarms on any error or throttle of fn in a minute.
func addFunctionAlarms(stack awscdk.Stack, name string, fn awslambda.Function) {
	id := constructID(name)
	period := &awscloudwatch.MetricOptions{Period: awscdk.Duration_Minutes(jsii.Number(1))}
	newAlarm(stack, id+"ErrorsAlarm", fn.MetricErrors(period),
		fmt.Sprintf("The %s function returned errors (crashes or timeouts, not 4xx/5xx responses).", name))
	newAlarm(stack, id+"ThrottlesAlarm", fn.MetricThrottles(period),
		fmt.Sprintf("The %s function was throttled (account or reserved concurrency exhausted).", name))
}

// addAPIAlarms alarms on API 5xx responses and on DynamoDB throttling and
// system errors for the operations the functions use.
func addAPIAlarms(stack awscdk.Stack, httpAPI awsapigatewayv2.HttpApi, table awsdynamodb.Table) {
	period := awscdk.Duration_Minutes(jsii.Number(1))
	ops := &[]awsdynamodb.Operation{awsdynamodb.Operation_GET_ITEM, awsdynamodb.Operation_UPDATE_ITEM}
	newAlarm(stack, "Api5xxAlarm", httpAPI.MetricServerError(&awscloudwatch.MetricOptions{Period: period}),
		"The lock API answered with 5xx (handler failures, integration errors or timeouts).")
	newAlarm(stack, "TableThrottlesAlarm",
		table.MetricThrottledRequestsForOperations(&awsdynamodb.OperationsMetricOptions{Operations: ops, Period: period}),
		"DynamoDB throttled GetItem/UpdateItem on the lock table.")
	newAlarm(stack, "TableSystemErrorsAlarm",
		table.MetricSystemErrorsForOperations(&awsdynamodb.SystemErrorsForOperationsMetricOptions{Operations: ops, Period: period}),
		"DynamoDB returned system errors (HTTP 500) for GetItem/UpdateItem on the lock table.")
}

// newAlarm fires when metric's sum reaches 1 in one period; no data is fine.
func newAlarm(stack awscdk.Stack, id string, metric awscloudwatch.IMetric, description string) {
	awscloudwatch.NewAlarm(stack, jsii.String(id), &awscloudwatch.AlarmProps{
		Metric:             metric,
		Threshold:          jsii.Number(1),
		EvaluationPeriods:  jsii.Number(1),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
		AlarmDescription:   jsii.String(description),
	})
}

// constructID turns a route name such as "acquire" into "Acquire".
func constructID(name string) string {
	if name == "" {
		return name
	}
	return strings.ToUpper(name[:1]) + name[1:]
}
