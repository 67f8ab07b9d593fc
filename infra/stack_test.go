package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/ft288/locks/api"
)

// wantDynamoDBActions is what each handler calls; written out here rather
// than read from DynamoDBActions so that widening a grant fails a test.
var wantDynamoDBActions = map[string][]string{
	"acquire": {"dynamodb:GetItem", "dynamodb:UpdateItem"}, // GetItem: the watch of wait_seconds
	"renew":   {"dynamodb:UpdateItem"},
	"release": {"dynamodb:UpdateItem"},
	"status":  {"dynamodb:GetItem"},
}

// wantTimeout is each function's timeout in seconds: 5 for one store call;
// acquire may wait up to 20 s (wait_seconds), then write (3 s budget).
var wantTimeout = map[string]int{"acquire": 25, "renew": 5, "release": 5, "status": 5}

// Variants of the app that the tests synthesize, once per test binary.
const (
	prod = "prod" // no context flags: IAM auth, retained data, default throttling
	dev  = "dev"  // auth=none destroy=true throttleRate=7 throttleBurst=9
)

// devStackName is the stackName context flag of the dev variant.
const devStackName = "LockServiceDev"

// synthesized is one synthesized app.
type synthesized struct {
	stack  awscdk.Stack
	tmpl   assertions.Template
	res    map[string]map[string]any // Resources by logical ID
	out    map[string]any            // Outputs
	outdir string
	assets string
}

var (
	synthOnce sync.Once
	synthRoot string
	synthErr  error
	synthApps map[string]*synthesized
)

func TestMain(m *testing.M) {
	// The jsii runtime (a node child process) starts while packages
	// initialize, before this runs: quiet its node-version banner from the
	// caller, e.g. JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20.
	code := m.Run()
	if synthRoot != "" {
		os.RemoveAll(synthRoot)
	}
	jsii.Close()
	os.Exit(code)
}

// synth returns the synthesized app of the given variant. Both variants are
// built on first use in one jsii runtime, since starting it is the slow part.
func synth(tb testing.TB, variant string) *synthesized {
	tb.Helper()
	synthOnce.Do(func() {
		synthApps, synthErr = synthAll()
	})
	if synthErr != nil {
		tb.Fatalf("synth: %v", synthErr)
	}
	return synthApps[variant]
}

func synthAll() (apps map[string]*synthesized, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	synthRoot, err = os.MkdirTemp("", "infra-test-")
	if err != nil {
		return nil, err
	}
	assets := filepath.Join(synthRoot, "assets")
	for _, r := range api.Routes {
		p := filepath.Join(assets, r.Name, "bootstrap")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(p, []byte(placeholder(r.Name)), 0o755); err != nil {
			return nil, err
		}
	}
	contexts := map[string]map[string]any{
		prod: {"assetDir": assets},
		dev: {"assetDir": assets, "auth": "none", "destroy": "true",
			"throttleRate": "7", "throttleBurst": "9", "stackName": devStackName},
	}
	apps = map[string]*synthesized{}
	for variant, ctx := range contexts {
		outdir := filepath.Join(synthRoot, variant)
		app, stack, err := NewApp(&awscdk.AppProps{Outdir: jsii.String(outdir), Context: &ctx})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", variant, err)
		}
		app.Synth(nil) // cached: Template_FromStack reuses this assembly
		tmpl := assertions.Template_FromStack(stack, nil)
		raw, err := json.Marshal(tmpl.ToJSON())
		if err != nil {
			return nil, err
		}
		var doc struct {
			Resources map[string]map[string]any
			Outputs   map[string]any
		}
		if err := json.Unmarshal(raw, &doc); err != nil {
			return nil, err
		}
		apps[variant] = &synthesized{stack: stack, tmpl: tmpl, res: doc.Resources, out: doc.Outputs,
			outdir: outdir, assets: assets}
	}
	return apps, nil
}

// placeholder is the content of the fake bootstrap for a route, distinct per
// route so each function's code asset can be traced back to its folder.
func placeholder(name string) string { return "#!/bin/sh\n# placeholder for " + name + "\nexit 1\n" }

// match runs a jsii assertion, which panics on mismatch, as a test error.
func match(tb testing.TB, what string, assert func()) {
	tb.Helper()
	defer func() {
		if r := recover(); r != nil {
			tb.Errorf("%s: %v", what, r)
		}
	}()
	assert()
}

// ofType returns the logical IDs of the resources of type typ, sorted.
func (s *synthesized) ofType(typ string) []string {
	var ids []string
	for id, r := range s.res {
		if r["Type"] == typ {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// only returns the logical ID of the one resource of type typ.
func (s *synthesized) only(tb testing.TB, typ string) string {
	tb.Helper()
	ids := s.ofType(typ)
	if len(ids) != 1 {
		tb.Fatalf("got %d %s resources, want 1", len(ids), typ)
	}
	return ids[0]
}

// props returns the Properties of resource id.
func (s *synthesized) props(tb testing.TB, id string) map[string]any {
	tb.Helper()
	r, ok := s.res[id]
	if !ok {
		tb.Fatalf("no resource %s", id)
	}
	p, _ := r["Properties"].(map[string]any)
	return p
}

// routeResource returns the logical ID of the AWS::ApiGatewayV2::Route of r.
func (s *synthesized) routeResource(tb testing.TB, r api.Route) string {
	tb.Helper()
	var found []string
	for _, id := range s.ofType("AWS::ApiGatewayV2::Route") {
		if s.props(tb, id)["RouteKey"] == r.Key() {
			found = append(found, id)
		}
	}
	if len(found) != 1 {
		tb.Fatalf("got %d routes with RouteKey %q, want 1", len(found), r.Key())
	}
	return found[0]
}

// functionOf follows route r's integration to the function that serves it.
func (s *synthesized) functionOf(tb testing.TB, r api.Route) string {
	tb.Helper()
	route := s.props(tb, s.routeResource(tb, r))
	integ := findRef(route["Target"])
	if integ == "" {
		tb.Fatalf("route %q: no integration in Target %v", r.Key(), route["Target"])
	}
	ip := s.props(tb, integ)
	if ip["PayloadFormatVersion"] != "2.0" || ip["IntegrationType"] != "AWS_PROXY" {
		tb.Errorf("route %q: got integration %v/%v, want AWS_PROXY/2.0", r.Key(), ip["IntegrationType"], ip["PayloadFormatVersion"])
	}
	fn := getAtt(ip["IntegrationUri"], "Arn")
	if s.res[fn]["Type"] != "AWS::Lambda::Function" {
		tb.Fatalf("route %q: integration target %v is not a function", r.Key(), ip["IntegrationUri"])
	}
	return fn
}

// findRef returns the first {"Ref": id} found anywhere inside v.
func findRef(v any) string {
	switch v := v.(type) {
	case map[string]any:
		if id, ok := v["Ref"].(string); ok {
			return id
		}
		for _, e := range v {
			if id := findRef(e); id != "" {
				return id
			}
		}
	case []any:
		for _, e := range v {
			if id := findRef(e); id != "" {
				return id
			}
		}
	}
	return ""
}

// getAtt returns id if v is {"Fn::GetAtt": [id, attr]}, else "".
func getAtt(v any, attr string) string {
	m, _ := v.(map[string]any)
	ga, _ := m["Fn::GetAtt"].([]any)
	if len(ga) == 2 && ga[1] == attr {
		id, _ := ga[0].(string)
		return id
	}
	return ""
}

// strs turns an IAM Action or Resource (string or list) into a list.
func strs(v any) []any {
	if l, ok := v.([]any); ok {
		return l
	}
	return []any{v}
}

func TestTable(t *testing.T) {
	tests := []struct {
		variant    string
		wantPolicy string
		wantProt   bool
	}{
		{variant: prod, wantPolicy: "Retain", wantProt: true},
		{variant: dev, wantPolicy: "Delete", wantProt: false},
	}
	for _, tt := range tests {
		t.Run(tt.variant, func(t *testing.T) {
			s := synth(t, tt.variant)
			match(t, "one table", func() { s.tmpl.ResourceCountIs(jsii.String("AWS::DynamoDB::Table"), jsii.Number(1)) })
			match(t, "table properties", func() {
				s.tmpl.HasResourceProperties(jsii.String("AWS::DynamoDB::Table"), map[string]any{
					"KeySchema":                        []any{map[string]any{"AttributeName": "resource", "KeyType": "HASH"}},
					"AttributeDefinitions":             []any{map[string]any{"AttributeName": "resource", "AttributeType": "S"}},
					"BillingMode":                      "PAY_PER_REQUEST",
					"TimeToLiveSpecification":          map[string]any{"AttributeName": "ttl", "Enabled": true},
					"PointInTimeRecoverySpecification": map[string]any{"PointInTimeRecoveryEnabled": true},
					"DeletionProtectionEnabled":        tt.wantProt,
					"TableName":                        assertions.Match_Absent(),
				})
			})
			match(t, "removal policy", func() {
				s.tmpl.HasResource(jsii.String("AWS::DynamoDB::Table"), map[string]any{
					"DeletionPolicy":      tt.wantPolicy,
					"UpdateReplacePolicy": tt.wantPolicy,
				})
			})
			for _, id := range s.ofType("AWS::Logs::LogGroup") {
				if got := s.res[id]["DeletionPolicy"]; got != tt.wantPolicy {
					t.Errorf("log group %s: got DeletionPolicy %v, want %s", id, got, tt.wantPolicy)
				}
			}
		})
	}
}

func TestFunctions(t *testing.T) {
	s := synth(t, prod)
	table := s.only(t, "AWS::DynamoDB::Table")
	match(t, "one function per route", func() {
		s.tmpl.ResourceCountIs(jsii.String("AWS::Lambda::Function"), jsii.Number(float64(len(api.Routes))))
	})
	for _, r := range api.Routes {
		t.Run(r.Name, func(t *testing.T) {
			fn := s.functionOf(t, r)
			p := s.props(t, fn)
			want := map[string]any{
				"Runtime":       "provided.al2023",
				"Architectures": []any{"arm64"},
				"Handler":       "bootstrap",
				"MemorySize":    float64(128),
				"Timeout":       float64(wantTimeout[r.Name]),
				"TracingConfig": map[string]any{"Mode": "Active"},
			}
			if r.Timeout != time.Duration(wantTimeout[r.Name])*time.Second {
				t.Errorf("api.Routes timeout of %s: got %s, want %ds", r.Name, r.Timeout, wantTimeout[r.Name])
			}
			for k, v := range want {
				if !reflect.DeepEqual(p[k], v) {
					t.Errorf("%s: got %v, want %v", k, p[k], v)
				}
			}
			env, _ := p["Environment"].(map[string]any)
			vars, _ := env["Variables"].(map[string]any)
			wantVars := map[string]any{
				"TABLE_NAME":                  map[string]any{"Ref": table},
				"MAX_TTL_SECONDS":             "86400",
				"TOMBSTONE_RETENTION_SECONDS": "604800",
				"DYNAMODB_RETURNS_OLD_ITEM":   "true",
			}
			if r.Name == "acquire" {
				wantVars["MAX_WAIT_SECONDS"] = "20"
			}
			if len(vars) != len(wantVars) {
				t.Errorf("env: got %v, want exactly %v", vars, wantVars)
			}
			for k, v := range wantVars {
				if !reflect.DeepEqual(vars[k], v) {
					t.Errorf("env %s: got %v, want %v", k, vars[k], v)
				}
			}
			// The handler reads this environment: it must talk to DynamoDB
			// itself and never read to explain a failed write, since the
			// renew and release roles have no GetItem.
			cfg, err := api.ConfigFromEnv(func(k string) string {
				if v, ok := vars[k].(string); ok {
					return v
				}
				if vars[k] != nil {
					return "table-from-ref"
				}
				return ""
			})
			if err != nil || cfg.Endpoint != "" || !cfg.OldItemOnFailure {
				t.Errorf("function config from the stack's environment: got %+v, %v; want no endpoint override and OldItemOnFailure", cfg, err)
			}
			lc, _ := p["LoggingConfig"].(map[string]any)
			if lc["LogFormat"] != "JSON" {
				t.Errorf("LogFormat: got %v, want JSON", lc["LogFormat"])
			}
			if lg := findRef(lc["LogGroup"]); s.res[lg]["Type"] != "AWS::Logs::LogGroup" {
				t.Errorf("LoggingConfig.LogGroup: got %v, want a log group of the stack", lc["LogGroup"])
			}
			// The code asset is <AssetDir>/<name>: its staged copy holds that
			// route's placeholder.
			code, _ := p["Code"].(map[string]any)
			key, _ := code["S3Key"].(string)
			staged := filepath.Join(s.outdir, "asset."+strings.TrimSuffix(key, ".zip"), "bootstrap")
			b, err := os.ReadFile(staged)
			if err != nil {
				t.Fatalf("code asset %q: %v", key, err)
			}
			if string(b) != placeholder(r.Name) {
				t.Errorf("code asset of %s: got %q, want the placeholder of %s", r.Name, b, r.Name)
			}
		})
	}
}

func TestRoutes(t *testing.T) {
	tests := []struct {
		variant  string
		wantAuth string
	}{
		{variant: prod, wantAuth: "AWS_IAM"},
		{variant: dev, wantAuth: ""}, // NONE or absent
	}
	for _, tt := range tests {
		t.Run(tt.variant, func(t *testing.T) {
			s := synth(t, tt.variant)
			match(t, "one route per api.Routes row", func() {
				s.tmpl.ResourceCountIs(jsii.String("AWS::ApiGatewayV2::Route"), jsii.Number(float64(len(api.Routes))))
			})
			for _, r := range api.Routes {
				p := s.props(t, s.routeResource(t, r))
				got, _ := p["AuthorizationType"].(string)
				if tt.wantAuth == "" {
					if got != "" && got != "NONE" {
						t.Errorf("route %q: got AuthorizationType %q, want none", r.Key(), got)
					}
					continue
				}
				if got != tt.wantAuth {
					t.Errorf("route %q: got AuthorizationType %q, want %q", r.Key(), got, tt.wantAuth)
				}
			}
		})
	}
}

// TestLeastPrivilege follows each route to its function and role and checks
// every statement that role can use.
func TestLeastPrivilege(t *testing.T) {
	s := synth(t, prod)
	table := s.only(t, "AWS::DynamoDB::Table")
	if len(wantDynamoDBActions) != len(api.Routes) {
		t.Fatalf("got %d routes, want %d: add the new route to wantDynamoDBActions", len(api.Routes), len(wantDynamoDBActions))
	}
	xray := []any{"xray:PutTelemetryRecords", "xray:PutTraceSegments"}
	for _, r := range api.Routes {
		t.Run(r.Name, func(t *testing.T) {
			want, ok := wantDynamoDBActions[r.Name]
			if !ok {
				t.Fatalf("route %q is not in wantDynamoDBActions", r.Name)
			}
			fn := s.props(t, s.functionOf(t, r))
			role := getAtt(fn["Role"], "Arn")
			if s.res[role]["Type"] != "AWS::IAM::Role" {
				t.Fatalf("function role: got %v, want a role of the stack", fn["Role"])
			}
			rp := s.props(t, role)
			if m, ok := rp["ManagedPolicyArns"]; ok {
				t.Errorf("role has managed policies %v, want none", m)
			}
			// Inline policies of the role plus every AWS::IAM::Policy on it.
			var stmts []any
			for _, pol := range strs(rp["Policies"]) {
				doc, _ := pol.(map[string]any)["PolicyDocument"].(map[string]any)
				stmts = append(stmts, strs(doc["Statement"])...)
			}
			for _, id := range s.ofType("AWS::IAM::Policy") {
				pp := s.props(t, id)
				for _, ref := range strs(pp["Roles"]) {
					if findRef(ref) == role {
						doc, _ := pp["PolicyDocument"].(map[string]any)
						stmts = append(stmts, strs(doc["Statement"])...)
					}
				}
			}
			logGroup := findRef(fn["LoggingConfig"])
			var gotDDB []string
			for _, st := range stmts {
				st := st.(map[string]any)
				actions := strs(st["Action"])
				res := strs(st["Resource"])
				if st["Effect"] != "Allow" || st["NotAction"] != nil || st["NotResource"] != nil {
					t.Errorf("statement %v: want a plain Allow with Action and Resource", st)
				}
				for _, a := range actions {
					a, _ := a.(string)
					if strings.Contains(a, "*") {
						t.Errorf("action %q: want no wildcard actions", a)
					}
				}
				switch {
				case slices.ContainsFunc(actions, func(a any) bool { return strings.HasPrefix(a.(string), "dynamodb:") }):
					for _, a := range actions {
						gotDDB = append(gotDDB, a.(string))
					}
					if len(res) != 1 || getAtt(res[0], "Arn") != table {
						t.Errorf("DynamoDB statement on %v, want the table ARN only", st["Resource"])
					}
				case slices.ContainsFunc(actions, func(a any) bool { return strings.HasPrefix(a.(string), "logs:") }):
					if len(res) != 1 || getAtt(res[0], "Arn") != logGroup {
						t.Errorf("logs statement on %v, want this function's log group %s only", st["Resource"], logGroup)
					}
				default:
					got := slices.Clone(actions)
					slices.SortFunc(got, func(a, b any) int { return strings.Compare(a.(string), b.(string)) })
					if !reflect.DeepEqual(got, xray) {
						t.Errorf("unexpected statement %v, want only DynamoDB, logs and X-Ray", st)
					}
				}
			}
			sort.Strings(gotDDB)
			if !slices.Equal(gotDDB, want) {
				t.Errorf("DynamoDB actions: got %v, want %v", gotDDB, want)
			}
		})
	}
}

func TestLogsAndStage(t *testing.T) {
	tests := []struct {
		variant   string
		wantRate  float64
		wantBurst float64
	}{
		{variant: prod, wantRate: DefaultThrottleRate, wantBurst: DefaultThrottleBurst},
		{variant: dev, wantRate: 7, wantBurst: 9},
	}
	for _, tt := range tests {
		t.Run(tt.variant, func(t *testing.T) {
			s := synth(t, tt.variant)
			groups := s.ofType("AWS::Logs::LogGroup")
			if len(groups) != len(api.Routes)+1 {
				t.Errorf("got %d log groups, want %d (one per function plus access logs)", len(groups), len(api.Routes)+1)
			}
			for _, id := range groups {
				if got := s.props(t, id)["RetentionInDays"]; got != float64(30) {
					t.Errorf("log group %s: got RetentionInDays %v, want 30", id, got)
				}
			}
			stage := s.props(t, s.only(t, "AWS::ApiGatewayV2::Stage"))
			if stage["StageName"] != "$default" || stage["AutoDeploy"] != true {
				t.Errorf("stage: got name %v autoDeploy %v, want $default true", stage["StageName"], stage["AutoDeploy"])
			}
			rs, _ := stage["DefaultRouteSettings"].(map[string]any)
			if rs["ThrottlingRateLimit"] != tt.wantRate || rs["ThrottlingBurstLimit"] != tt.wantBurst {
				t.Errorf("throttling: got rate %v burst %v, want %v %v", rs["ThrottlingRateLimit"], rs["ThrottlingBurstLimit"], tt.wantRate, tt.wantBurst)
			}
			al, _ := stage["AccessLogSettings"].(map[string]any)
			if dest := getAtt(al["DestinationArn"], "Arn"); s.res[dest]["Type"] != "AWS::Logs::LogGroup" {
				t.Errorf("access logs: got destination %v, want a log group of the stack", al["DestinationArn"])
			}
			format, _ := al["Format"].(string)
			var fields map[string]string
			if err := json.Unmarshal([]byte(format), &fields); err != nil {
				t.Fatalf("access log format %q is not JSON: %v", format, err)
			}
			for _, k := range []string{"requestId", "routeKey", "status", "integrationLatency", "principal"} {
				if !strings.HasPrefix(fields[k], "$context.") {
					t.Errorf("access log field %q: got %q, want a $context variable", k, fields[k])
				}
			}
		})
	}
}

func TestAlarms(t *testing.T) {
	s := synth(t, prod)
	match(t, "alarm count", func() {
		// Errors and Throttles per function, API 5xx, DynamoDB throttles
		// and system errors.
		s.tmpl.ResourceCountIs(jsii.String("AWS::CloudWatch::Alarm"), jsii.Number(float64(2*len(api.Routes)+3)))
	})
	table := s.only(t, "AWS::DynamoDB::Table")
	httpAPI := s.only(t, "AWS::ApiGatewayV2::Api")
	for _, r := range api.Routes {
		fn := s.functionOf(t, r)
		for _, metric := range []string{"Errors", "Throttles"} {
			match(t, r.Name+" "+metric+" alarm", func() {
				s.tmpl.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), map[string]any{
					"Namespace":  "AWS/Lambda",
					"MetricName": metric,
					"Dimensions": []any{map[string]any{"Name": "FunctionName", "Value": map[string]any{"Ref": fn}}},
				})
			})
		}
	}
	match(t, "API 5xx alarm", func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), map[string]any{
			"Namespace":  "AWS/ApiGateway",
			"MetricName": "5xx",
			"Dimensions": []any{map[string]any{"Name": "ApiId", "Value": map[string]any{"Ref": httpAPI}}},
		})
	})
	for _, metric := range []string{"ThrottledRequests", "SystemErrors"} {
		for _, op := range []string{"GetItem", "UpdateItem"} {
			match(t, "DynamoDB "+metric+" "+op+" alarm", func() {
				s.tmpl.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), map[string]any{
					"Metrics": assertions.Match_ArrayWith(&[]any{assertions.Match_ObjectLike(&map[string]any{
						"MetricStat": map[string]any{"Metric": map[string]any{
							"Namespace":  "AWS/DynamoDB",
							"MetricName": metric,
							"Dimensions": assertions.Match_ArrayWith(&[]any{
								map[string]any{"Name": "Operation", "Value": op},
								map[string]any{"Name": "TableName", "Value": map[string]any{"Ref": table}},
							}),
						}},
					})}),
				})
			})
		}
	}
}

func TestOutputs(t *testing.T) {
	s := synth(t, prod)
	table := s.only(t, "AWS::DynamoDB::Table")
	match(t, "TableName output", func() {
		s.tmpl.HasOutput(jsii.String("TableName"), map[string]any{"Value": map[string]any{"Ref": table}})
	})
	url, _ := json.Marshal(s.out["ApiUrl"])
	if !strings.Contains(string(url), `"Ref":"`+s.only(t, "AWS::ApiGatewayV2::Api")+`"`) ||
		!strings.Contains(string(url), "execute-api") {
		t.Errorf("ApiUrl output: got %s, want the execute-api URL of the API", url)
	}
}

// TestNagReport reads the AwsSolutions report that every synth writes and
// fails on any unsuppressed error-level finding or reason-less suppression.
func TestNagReport(t *testing.T) {
	tests := []struct {
		variant   string
		stackName string
		wantAPIG4 string // Compliance of the AwsSolutions-APIG4 rows
	}{
		{variant: prod, stackName: DefaultStackName, wantAPIG4: "Compliant"},
		{variant: dev, stackName: devStackName, wantAPIG4: "Suppressed"},
	}
	for _, tt := range tests {
		t.Run(tt.variant, func(t *testing.T) {
			s := synth(t, tt.variant)
			// The file is AwsSolutions-<stage prefix>-<stack>-NagReport.csv;
			// an App's prefix is empty.
			paths, _ := filepath.Glob(filepath.Join(s.outdir, "AwsSolutions-*"+tt.stackName+"-NagReport.csv"))
			if len(paths) != 1 {
				t.Fatalf("got nag reports %v in %s, want 1", paths, s.outdir)
			}
			f, err := os.Open(paths[0])
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			rows, err := csv.NewReader(f).ReadAll()
			if err != nil {
				t.Fatalf("parse %s: %v", paths[0], err)
			}
			wantHeader := []string{"Rule ID", "Resource ID", "Compliance", "Exception Reason", "Rule Level", "Rule Info"}
			if len(rows) < 2 || !slices.Equal(rows[0], wantHeader) {
				t.Fatalf("got report %v, want header %v and findings", rows, wantHeader)
			}
			apig4 := 0
			for _, row := range rows[1:] {
				rule, resource, compliance, reason, level := row[0], row[1], row[2], row[3], row[4]
				switch compliance {
				case "Non-Compliant":
					if level == "Error" {
						t.Errorf("%s on %s: Non-Compliant at level Error: %s", rule, resource, row[5])
					}
				case "Suppressed":
					// Reasons read "[appliesTo] text" when scoped.
					text := reason
					if strings.HasPrefix(text, "[") {
						text = text[strings.Index(text, "]")+1:]
					}
					if strings.TrimSpace(text) == "" || text == "N/A" {
						t.Errorf("%s on %s: suppressed without a reason", rule, resource)
					}
				case "Compliant":
				default:
					t.Errorf("%s on %s: got compliance %q, want Compliant, Non-Compliant or Suppressed", rule, resource, compliance)
				}
				if rule == "AwsSolutions-APIG4" {
					apig4++
					if compliance != tt.wantAPIG4 {
						t.Errorf("APIG4 on %s: got %s, want %s", resource, compliance, tt.wantAPIG4)
					}
				}
			}
			if apig4 != len(api.Routes) {
				t.Errorf("got %d APIG4 findings, want one per route (%d)", apig4, len(api.Routes))
			}
		})
	}
}
