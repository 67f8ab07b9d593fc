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

// wantFunctions are the Lambda functions of the service, one per distinct
// api.Routes Name; written out so that a function more or less fails a test.
// A stack without administrators has all but admin.
var wantFunctions = []string{"acquire", "wait", "status", "release", "renew", "watch", "lockset", "locksetwait", "admin"}

// wantThrottle is each route's throttle on the default stage, written out:
// the quick routes admit 1,000 requests/s each, the routes that wait few
// (api/capacity.go).
var wantThrottle = map[string]api.Throttle{
	"POST /locks/{resource}":         {Rate: 1000, Burst: 1000},
	"POST /locks/{resource}/wait":    {Rate: 15, Burst: 75},
	"GET /locks/{resource}":          {Rate: 1000, Burst: 1000},
	"DELETE /locks/{resource}":       {Rate: 1000, Burst: 1000},
	"POST /locks/{resource}/renew":   {Rate: 1000, Burst: 1000},
	"GET /locks/{resource}/watch":    {Rate: 4, Burst: 20},
	"GET /admin/locks":               {Rate: 5, Burst: 10},
	"DELETE /admin/locks/{resource}": {Rate: 5, Burst: 10},
	// The semaphore rows: a bucket of their own (API Gateway throttles by
	// route key), lower for the two that wait.
	"POST /semaphores/{name}":         {Rate: 1000, Burst: 1000},
	"POST /semaphores/{name}/wait":    {Rate: 4, Burst: 20},
	"GET /semaphores/{name}":          {Rate: 1000, Burst: 1000},
	"DELETE /semaphores/{name}":       {Rate: 1000, Burst: 1000},
	"POST /semaphores/{name}/renew":   {Rate: 1000, Burst: 1000},
	"GET /semaphores/{name}/watch":    {Rate: 1, Burst: 5},
	"GET /admin/semaphores":           {Rate: 5, Burst: 10},
	"DELETE /admin/semaphores/{name}": {Rate: 5, Burst: 10},
	"POST /rwlocks/{name}/read":       {Rate: 1000, Burst: 1000},
	"POST /rwlocks/{name}/write":      {Rate: 1000, Burst: 1000},
	"POST /rwlocks/{name}/read/wait":  {Rate: 1, Burst: 5},
	"POST /rwlocks/{name}/write/wait": {Rate: 1, Burst: 5},
	"GET /rwlocks/{name}":             {Rate: 1000, Burst: 1000},
	"DELETE /rwlocks/{name}":          {Rate: 1000, Burst: 1000},
	"POST /rwlocks/{name}/renew":      {Rate: 1000, Burst: 1000},
	"GET /rwlocks/{name}/watch":       {Rate: 1, Burst: 5},
	"GET /admin/rwlocks":              {Rate: 5, Burst: 10},
	"DELETE /admin/rwlocks/{name}":    {Rate: 5, Burst: 10},
	// The lock set rows: up to 50 writes a request, a few a second.
	"POST /locksets/{prefix}":       {Rate: 20, Burst: 40},
	"POST /locksets/{prefix}/wait":  {Rate: 1, Burst: 4},
	"POST /locksets/{prefix}/renew": {Rate: 20, Burst: 40},
	"DELETE /locksets/{prefix}":     {Rate: 20, Burst: 40},
}

// tunedThrottle is the tuned variant's -c throttle: these routes' settings
// replace the table's.
var tunedThrottle = map[string]api.Throttle{
	"POST /locks/{resource}":      {Rate: 1300, Burst: 1300},
	"POST /locks/{resource}/wait": {Rate: 30, Burst: 150},
}

// testAdmins is the admins context flag of the admin variant: a role (all
// its sessions) and a user.
const testAdmins = "arn:aws:iam::111122223333:role/ops,arn:aws:iam::111122223333:user/alice"

// wantDynamoDBActions is what each handler calls; written out here rather
// than read from DynamoDBActions so that widening a grant fails a test.
var wantDynamoDBActions = map[string][]string{
	"acquire": {"dynamodb:UpdateItem"},                     // a try never reads: DynamoDB returns the old item
	"wait":    {"dynamodb:GetItem", "dynamodb:UpdateItem"}, // GetItem: the watch of a held lock and its queue
	"renew":   {"dynamodb:UpdateItem"},
	"release": {"dynamodb:UpdateItem"},
	"status":  {"dynamodb:GetItem"},
	"watch":   {"dynamodb:GetItem", "dynamodb:UpdateItem"}, // UpdateItem: the record of an expiry it answers
	"admin":   {"dynamodb:Scan", "dynamodb:UpdateItem"},    // list (Scan), force release
	// A set's try, renew and release are the lock's writes; its wait also
	// watches the name that refused it.
	"lockset":     {"dynamodb:UpdateItem"},
	"locksetwait": {"dynamodb:GetItem", "dynamodb:UpdateItem"},
}

// wantTimeout is each function's timeout in seconds: 5 for the quick
// functions (one store call; a semaphore's try a few); wait and watch may
// wait up to 20 s (wait_seconds), then write (3 s budget); the admin
// function may scan several pages.
var wantTimeout = map[string]int{"acquire": 5, "wait": 25, "renew": 5, "release": 5, "status": 5, "watch": 25, "admin": 10,
	"lockset": 10, "locksetwait": 29} // a set: 25 writes and 25 releases (5 + 3 s), after a 20 s wait for locksetwait

// Variants of the app that the tests synthesize, once per test binary.
const (
	prod   = "prod"   // no context flags: IAM auth, retained data, default throttling, no admin API, nothing reserved
	dev    = "dev"    // auth=none destroy=true throttleRate=7 throttleBurst=9
	multi2 = "multi2" // regions=us-east-1,us-east-2 witness=us-west-2
	multi3 = "multi3" // regions=eu-west-1,eu-west-2,eu-west-3 destroy=true
	admin  = "admin"  // admins=testAdmins reserve=true
	tuned  = "tuned"  // reserve=true reserveAcquire=60 reserveWait=80 reserveRenew=30 reserveRelease=15 throttle=tunedThrottle
)

// devStackName is the stackName context flag of the dev variant.
const devStackName = "LockServiceDev"

// synthesized is one synthesized stack.
type synthesized struct {
	name string
	// routes are the api.Routes rows the stack should deploy (the admin
	// ones only in the admin variant), fnNames their functions.
	routes  []api.Route
	fnNames []string
	stack   awscdk.Stack
	tmpl    assertions.Template
	res     map[string]map[string]any // Resources by logical ID
	out     map[string]any            // Outputs
	outdir  string
	assets  string
}

var (
	synthOnce sync.Once
	synthRoot string
	synthErr  error
	synthApps map[string][]*synthesized // the stacks of each variant, in NewApp's order
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

// synth returns the one stack of a single-Region variant (prod, dev).
func synth(tb testing.TB, variant string) *synthesized {
	tb.Helper()
	stacks := synthStacks(tb, variant)
	if len(stacks) != 1 {
		tb.Fatalf("variant %s: got %d stacks, want 1", variant, len(stacks))
	}
	return stacks[0]
}

// synthStacks returns the stacks of the given variant. All variants are
// built on first use in one jsii runtime, since starting it is the slow part.
func synthStacks(tb testing.TB, variant string) []*synthesized {
	tb.Helper()
	synthOnce.Do(func() {
		synthApps, synthErr = synthAll()
	})
	if synthErr != nil {
		tb.Fatalf("synth: %v", synthErr)
	}
	return synthApps[variant]
}

func synthAll() (apps map[string][]*synthesized, err error) {
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
		multi2: {"assetDir": assets, "regions": "us-east-1,us-east-2", "witness": "us-west-2"},
		multi3: {"assetDir": assets, "regions": "eu-west-1, eu-west-2, eu-west-3", "destroy": "true"},
		admin:  {"assetDir": assets, "admins": testAdmins, "reserve": "true"},
		tuned: {"assetDir": assets, "reserve": "true", "reserveAcquire": "60", "reserveWait": "80", "reserveRenew": "30", "reserveRelease": "15",
			"throttle": "acquire=1300:1300,acquireWait=30:150"},
	}
	apps = map[string][]*synthesized{}
	for variant, ctx := range contexts {
		var routes []api.Route
		var fnNames []string
		for _, r := range api.Routes {
			if r.Admin && variant != admin {
				continue
			}
			routes = append(routes, r)
			if !slices.Contains(fnNames, r.Name) {
				fnNames = append(fnNames, r.Name)
			}
		}
		outdir := filepath.Join(synthRoot, variant)
		app, stacks, err := NewApp(&awscdk.AppProps{Outdir: jsii.String(outdir), Context: &ctx})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", variant, err)
		}
		app.Synth(nil) // cached: Template_FromStack reuses this assembly
		for _, stack := range stacks {
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
			apps[variant] = append(apps[variant], &synthesized{name: *stack.StackName(), routes: routes, fnNames: fnNames,
				stack: stack, tmpl: tmpl, res: doc.Resources, out: doc.Outputs, outdir: outdir, assets: assets})
		}
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
	// One Region (the default) keeps its own table with TTL, unchanged;
	// only the multi-Region option builds a global table.
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
			match(t, "no global table", func() {
				s.tmpl.ResourceCountIs(jsii.String("AWS::DynamoDB::GlobalTable"), jsii.Number(0))
			})
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

// functions follows every row the stack deploys to the function that serves
// it and returns each function's logical ID by name; rows of one name must
// reach one function.
func (s *synthesized) functions(tb testing.TB) map[string]string {
	tb.Helper()
	fns := map[string]string{}
	for _, r := range s.routes {
		fn := s.functionOf(tb, r)
		if prev, ok := fns[r.Name]; ok && prev != fn {
			tb.Errorf("rows of %s are served by %s and %s, want one function", r.Name, prev, fn)
		}
		fns[r.Name] = fn
	}
	return fns
}

// checkEnv checks a function's environment: the table (a Ref in one
// Region, the global table's name in several), the metrics namespace (the
// stack name) and the per-function settings.
func checkEnv(tb testing.TB, name string, vars map[string]any, wantTable any, namespace string) {
	tb.Helper()
	wantVars := map[string]any{
		"TABLE_NAME":                  wantTable,
		"MAX_TTL_SECONDS":             "86400",
		"TOMBSTONE_RETENTION_SECONDS": "604800",
		"DYNAMODB_RETURNS_OLD_ITEM":   "true",
		"METRICS_NAMESPACE":           namespace,
	}
	// Only the functions that wait get MAX_WAIT_SECONDS; the ones that
	// grant leases get MAX_LOCK_DELAY_SECONDS.
	switch name {
	case "acquire", "lockset":
		wantVars["MAX_LOCK_DELAY_SECONDS"] = "300"
	case "wait", "locksetwait":
		wantVars["MAX_WAIT_SECONDS"] = "20"
		wantVars["MAX_LOCK_DELAY_SECONDS"] = "300"
	case "watch":
		wantVars["MAX_WAIT_SECONDS"] = "20"
	}
	if name == "admin" {
		wantVars["ADMIN_PRINCIPALS"] = testAdmins
	}
	if len(vars) != len(wantVars) {
		tb.Errorf("env: got %v, want exactly %v", vars, wantVars)
	}
	for k, v := range wantVars {
		if !reflect.DeepEqual(vars[k], v) {
			tb.Errorf("env %s: got %v, want %v", k, vars[k], v)
		}
	}
	// The handler reads this environment: it must talk to DynamoDB itself
	// and never read to explain a failed write, since the renew and
	// release roles have no GetItem.
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
		tb.Errorf("function config from the stack's environment: got %+v, %v; want no endpoint override and OldItemOnFailure", cfg, err)
	}
	// The handler's metrics land in the namespace the dashboard and the
	// alarms read.
	if cfg.MetricsNamespace != namespace {
		tb.Errorf("handler's metrics namespace: got %q, want %q", cfg.MetricsNamespace, namespace)
	}
	if (name == "acquire" || name == "wait" || name == "lockset" || name == "locksetwait") && cfg.MaxLockDelaySeconds != MaxLockDelaySeconds {
		tb.Errorf("handler's MaxLockDelaySeconds: got %d, want %d", cfg.MaxLockDelaySeconds, MaxLockDelaySeconds)
	}
	// The admin handler reads the administrators the stack was given.
	if want, _ := api.ParseAdminPrincipals(fmt.Sprint(wantVars["ADMIN_PRINCIPALS"])); name == "admin" && !slices.Equal(cfg.Admins, want) {
		tb.Errorf("handler's administrators: got %q, want %q", cfg.Admins, want)
	}
}

func TestFunctions(t *testing.T) {
	for _, r := range api.Routes {
		if r.Timeout != time.Duration(wantTimeout[r.Name])*time.Second {
			t.Errorf("api.Routes timeout of %s: got %s, want %ds", r.Key(), r.Timeout, wantTimeout[r.Name])
		}
	}
	tests := []struct {
		variant string
		want    []string
	}{
		{variant: prod, want: wantFunctions[:8]}, // no admin API by default
		{variant: admin, want: wantFunctions},
	}
	for _, tt := range tests {
		t.Run(tt.variant, func(t *testing.T) {
			checkFunctions(t, synth(t, tt.variant), tt.want)
		})
	}
}

func checkFunctions(t *testing.T, s *synthesized, want []string) {
	table := s.only(t, "AWS::DynamoDB::Table")
	match(t, "one function per distinct route name", func() {
		s.tmpl.ResourceCountIs(jsii.String("AWS::Lambda::Function"), jsii.Number(float64(len(want))))
	})
	fns := s.functions(t)
	var names []string
	for name := range fns {
		names = append(names, name)
	}
	if !slices.Equal(sorted(names), sorted(want)) {
		t.Errorf("functions reached by the routes: got %v, want %v", sorted(names), sorted(want))
	}
	for _, name := range want {
		t.Run(name, func(t *testing.T) {
			fn, ok := fns[name]
			if !ok {
				t.Fatalf("no route reaches function %s", name)
			}
			p := s.props(t, fn)
			want := map[string]any{
				"Runtime":       "provided.al2023",
				"Architectures": []any{"arm64"},
				"Handler":       "bootstrap",
				"MemorySize":    float64(128),
				"Timeout":       float64(wantTimeout[name]),
				"TracingConfig": map[string]any{"Mode": "Active"},
			}
			for k, v := range want {
				if !reflect.DeepEqual(p[k], v) {
					t.Errorf("%s: got %v, want %v", k, p[k], v)
				}
			}
			env, _ := p["Environment"].(map[string]any)
			vars, _ := env["Variables"].(map[string]any)
			checkEnv(t, name, vars, map[string]any{"Ref": table}, DefaultStackName)
			lc, _ := p["LoggingConfig"].(map[string]any)
			if lc["LogFormat"] != "JSON" {
				t.Errorf("LogFormat: got %v, want JSON", lc["LogFormat"])
			}
			if lg := findRef(lc["LogGroup"]); s.res[lg]["Type"] != "AWS::Logs::LogGroup" {
				t.Errorf("LoggingConfig.LogGroup: got %v, want a log group of the stack", lc["LogGroup"])
			}
			// The code asset is <AssetDir>/<name>: its staged copy holds that
			// function's placeholder.
			code, _ := p["Code"].(map[string]any)
			key, _ := code["S3Key"].(string)
			staged := filepath.Join(s.outdir, "asset."+strings.TrimSuffix(key, ".zip"), "bootstrap")
			b, err := os.ReadFile(staged)
			if err != nil {
				t.Fatalf("code asset %q: %v", key, err)
			}
			if string(b) != placeholder(name) {
				t.Errorf("code asset of %s: got %q, want the placeholder of %s", name, b, name)
			}
		})
	}
}

// sorted returns a sorted copy of l.
func sorted(l []string) []string {
	l = slices.Clone(l)
	sort.Strings(l)
	return l
}

func TestRoutes(t *testing.T) {
	tests := []struct {
		variant  string
		wantAuth string
	}{
		{variant: prod, wantAuth: "AWS_IAM"},
		{variant: dev, wantAuth: ""}, // NONE or absent
		{variant: admin, wantAuth: "AWS_IAM"},
	}
	for _, tt := range tests {
		t.Run(tt.variant, func(t *testing.T) {
			s := synth(t, tt.variant)
			match(t, "one route per deployed row", func() {
				s.tmpl.ResourceCountIs(jsii.String("AWS::ApiGatewayV2::Route"), jsii.Number(float64(len(s.routes))))
			})
			for _, r := range s.routes {
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

// adminKeys are the admin routes' keys, written out.
var adminKeys = []string{"GET /admin/locks", "DELETE /admin/locks/{resource}", "GET /admin/semaphores", "DELETE /admin/semaphores/{name}",
	"GET /admin/rwlocks", "DELETE /admin/rwlocks/{name}"}

// TestAdminRoutes checks that the admin API exists only with
// administrators: then its routes (list and force release, of locks and of
// semaphores and of read/write locks) are IAM-authorized and reach the admin function, whose environment
// lists the administrators; without them (the default, and auth=none) there
// is no admin route, no function that may Scan or reads ADMIN_PRINCIPALS,
// and no AdminInvokeArns output.
func TestAdminRoutes(t *testing.T) {
	n := 0
	for _, r := range api.Routes {
		if r.Admin {
			n++
			if !slices.Contains(adminKeys, r.Key()) {
				t.Errorf("admin row %q is not one of %v", r.Key(), adminKeys)
			}
		}
	}
	if n != len(adminKeys) {
		t.Errorf("got %d admin rows in api.Routes, want %d (list, force release; of locks, semaphores and read/write locks)", n, len(adminKeys))
	}
	tests := []struct {
		variant   string
		wantAdmin bool
	}{
		{variant: prod},
		{variant: dev},
		{variant: tuned},
		{variant: admin, wantAdmin: true},
	}
	for _, tt := range tests {
		t.Run(tt.variant, func(t *testing.T) {
			s := synth(t, tt.variant)
			var keys []string
			for _, id := range s.ofType("AWS::ApiGatewayV2::Route") {
				keys = append(keys, s.props(t, id)["RouteKey"].(string))
			}
			for _, key := range adminKeys {
				if got := slices.Contains(keys, key); got != tt.wantAdmin {
					t.Errorf("route %s deployed: got %v, want %v (routes %v)", key, got, tt.wantAdmin, keys)
				}
			}
			if _, got := s.out["AdminInvokeArns"]; got != tt.wantAdmin {
				t.Errorf("AdminInvokeArns output: got %v, want %v", got, tt.wantAdmin)
			}
			var withAdmins, scanners []string
			for _, fn := range s.ofType("AWS::Lambda::Function") {
				env, _ := s.props(t, fn)["Environment"].(map[string]any)
				vars, _ := env["Variables"].(map[string]any)
				if _, ok := vars["ADMIN_PRINCIPALS"]; ok {
					withAdmins = append(withAdmins, fn)
				}
				if slices.Contains(s.dynamoDBActions(t, s.roleOf(t, fn)), "dynamodb:Scan") {
					scanners = append(scanners, fn)
				}
			}
			if !tt.wantAdmin {
				if len(withAdmins)+len(scanners) != 0 {
					t.Errorf("functions %v read ADMIN_PRINCIPALS and %v may Scan, want none without an admin API", withAdmins, scanners)
				}
				return
			}
			fns := s.functions(t)
			for _, key := range adminKeys {
				match(t, key, func() {
					s.tmpl.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Route"), map[string]any{
						"RouteKey":          key,
						"AuthorizationType": "AWS_IAM",
					})
				})
			}
			for _, r := range s.routes {
				if got := s.functionOf(t, r); r.Admin != (got == fns["admin"]) {
					t.Errorf("route %q (Admin %v) is served by %s; the admin function is %s", r.Key(), r.Admin, got, fns["admin"])
				}
			}
			if !slices.Equal(withAdmins, []string{fns["admin"]}) {
				t.Errorf("functions with ADMIN_PRINCIPALS: got %v, want the admin function %s only", withAdmins, fns["admin"])
			}
			match(t, "the admin function's administrators", func() {
				s.tmpl.HasResourceProperties(jsii.String("AWS::Lambda::Function"), map[string]any{
					"Environment": map[string]any{"Variables": assertions.Match_ObjectLike(&map[string]any{
						"ADMIN_PRINCIPALS": testAdmins,
					})},
				})
			})
		})
	}
}

// roleStatements returns every statement role can use: its inline policies
// and every AWS::IAM::Policy attached to it.
func (s *synthesized) roleStatements(tb testing.TB, role string) []map[string]any {
	tb.Helper()
	rp := s.props(tb, role)
	var stmts []any
	for _, pol := range strs(rp["Policies"]) {
		if pol == nil {
			continue
		}
		doc, _ := pol.(map[string]any)["PolicyDocument"].(map[string]any)
		stmts = append(stmts, strs(doc["Statement"])...)
	}
	for _, id := range s.ofType("AWS::IAM::Policy") {
		pp := s.props(tb, id)
		for _, ref := range strs(pp["Roles"]) {
			if findRef(ref) == role {
				doc, _ := pp["PolicyDocument"].(map[string]any)
				stmts = append(stmts, strs(doc["Statement"])...)
			}
		}
	}
	out := make([]map[string]any, len(stmts))
	for i, st := range stmts {
		out[i], _ = st.(map[string]any)
	}
	return out
}

// roleOf returns the logical ID of function fn's role.
func (s *synthesized) roleOf(tb testing.TB, fn string) string {
	tb.Helper()
	role := getAtt(s.props(tb, fn)["Role"], "Arn")
	if s.res[role]["Type"] != "AWS::IAM::Role" {
		tb.Fatalf("function %s role: got %v, want a role of the stack", fn, s.props(tb, fn)["Role"])
	}
	return role
}

// dynamoDBActions returns the DynamoDB actions role may call, sorted.
func (s *synthesized) dynamoDBActions(tb testing.TB, role string) []string {
	tb.Helper()
	var got []string
	for _, st := range s.roleStatements(tb, role) {
		for _, a := range strs(st["Action"]) {
			if a, _ := a.(string); strings.HasPrefix(a, "dynamodb:") {
				got = append(got, a)
			}
		}
	}
	sort.Strings(got)
	return got
}

// TestLeastPrivilege follows each function to its role and checks every
// statement that role can use. tableARN tells whether a DynamoDB
// statement's resource is the lock table.
func TestLeastPrivilege(t *testing.T) {
	for _, variant := range []string{prod, admin} {
		t.Run(variant, func(t *testing.T) {
			s := synth(t, variant)
			table := s.only(t, "AWS::DynamoDB::Table")
			checkLeastPrivilege(t, s, func(res any) bool { return getAtt(res, "Arn") == table })
		})
	}
}

func checkLeastPrivilege(t *testing.T, s *synthesized, tableARN func(res any) bool) {
	t.Helper()
	if len(wantDynamoDBActions) != len(wantFunctions) {
		t.Fatalf("wantDynamoDBActions has %d functions, want %d", len(wantDynamoDBActions), len(wantFunctions))
	}
	xray := []any{"xray:PutTelemetryRecords", "xray:PutTraceSegments"}
	fns := s.functions(t)
	for _, name := range s.fnNames {
		t.Run(name, func(t *testing.T) {
			want := wantDynamoDBActions[name]
			fnID, ok := fns[name]
			if !ok {
				t.Fatalf("no route reaches function %s", name)
			}
			fn := s.props(t, fnID)
			role := s.roleOf(t, fnID)
			if m, ok := s.props(t, role)["ManagedPolicyArns"]; ok {
				t.Errorf("role has managed policies %v, want none", m)
			}
			logGroup := findRef(fn["LoggingConfig"])
			for _, st := range s.roleStatements(t, role) {
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
					if len(res) != 1 || !tableARN(res[0]) {
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
			if got := s.dynamoDBActions(t, role); !slices.Equal(got, want) {
				t.Errorf("DynamoDB actions: got %v, want %v", got, want)
			}
		})
	}
}

// TestOnlyAdminMayScan checks every role of the stack, not only those the
// routes lead to: a lock caller's function (acquire, status, renew,
// release) cannot Scan, and only the admin function's role can.
func TestOnlyAdminMayScan(t *testing.T) {
	s := synth(t, admin)
	fns := s.functions(t)
	adminRole := s.roleOf(t, fns["admin"])
	for _, r := range s.routes {
		if r.Admin {
			continue
		}
		if got := s.dynamoDBActions(t, s.roleOf(t, fns[r.Name])); slices.Contains(got, "dynamodb:Scan") {
			t.Errorf("the %s role (lock route %q) may Scan: %v", r.Name, r.Key(), got)
		}
	}
	scanners := 0
	for _, role := range s.ofType("AWS::IAM::Role") {
		if slices.Contains(s.dynamoDBActions(t, role), "dynamodb:Scan") {
			scanners++
			if role != adminRole {
				t.Errorf("role %s may Scan; only the admin role %s may", role, adminRole)
			}
		}
	}
	if scanners != 1 {
		t.Errorf("got %d roles that may Scan, want 1 (admin)", scanners)
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
			if len(groups) != len(s.fnNames)+1 {
				t.Errorf("got %d log groups, want %d (one per function plus access logs)", len(groups), len(s.fnNames)+1)
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

// TestRouteThrottles checks the default stage's throttles: the stage
// default, and each deployed route's own (its api.Routes Throttle, and the
// numbers written out in wantThrottle), or the throttle flag's (tuned):
// every quick route 1,000 requests/s or more, every route that waits below
// renew, each within API Gateway's account bucket; the stage depends on
// every route, since API Gateway refuses settings for a route key it does
// not have yet.
func TestRouteThrottles(t *testing.T) {
	for key, want := range wantThrottle {
		i := slices.IndexFunc(api.Routes, func(r api.Route) bool { return r.Key() == key })
		if i < 0 {
			t.Errorf("no route %s in api.Routes", key)
		} else if got := api.Routes[i].Throttle; got != want {
			t.Errorf("api.Routes throttle of %s: got %+v, want %+v", key, got, want)
		}
	}
	if len(wantThrottle) != len(api.Routes) {
		t.Errorf("wantThrottle has %d routes, api.Routes %d", len(wantThrottle), len(api.Routes))
	}
	for _, variant := range []string{prod, dev, admin, tuned} {
		t.Run(variant, func(t *testing.T) {
			s := synth(t, variant)
			id := s.only(t, "AWS::ApiGatewayV2::Stage")
			settings, _ := s.props(t, id)["RouteSettings"].(map[string]any)
			want := map[string]any{}

			for _, r := range s.routes {
				th := wantThrottle[r.Key()]
				if o, ok := tunedThrottle[r.Key()]; ok && variant == tuned {
					th = o
				}

				want[r.Key()] = map[string]any{
					"ThrottlingRateLimit":  th.Rate,
					"ThrottlingBurstLimit": float64(th.Burst),
				}
				if th.Burst > 5000 || th.Rate > 10000 {
					t.Errorf("%s: %+v, above API Gateway's account bucket of 10,000 requests/s, burst 5,000", r.Key(), th)
				}
			}
			if !reflect.DeepEqual(settings, want) {
				t.Errorf("RouteSettings: got %v, want %v", settings, want)
			}
			renew := settings["POST /locks/{resource}/renew"].(map[string]any)["ThrottlingRateLimit"].(float64)
			for _, r := range s.routes {
				rate := settings[r.Key()].(map[string]any)["ThrottlingRateLimit"].(float64)
				if r.Quick() && rate < 1000 {
					t.Errorf("quick route %s: rate %g, want 1,000 or more", r.Key(), rate)
				}
				if r.Waits && rate >= renew {
					t.Errorf("waiting route %s: rate %g, want below renew's %g", r.Key(), rate, renew)
				}
			}
			deps := strs(s.res[id]["DependsOn"])
			for _, route := range s.ofType("AWS::ApiGatewayV2::Route") {
				if !slices.Contains(deps, any(route)) {
					t.Errorf("stage does not depend on route %s (DependsOn %v)", route, deps)
				}
			}
		})
	}
}

// TestReservedConcurrency checks ReservedConcurrentExecutions: none without
// reserve=true (the stack must deploy on any account), api.Routes' numbers
// with it (acquire 50, wait 100, watch 50, renew 50, release 20; status and
// admin none), and the numbers of the override flags.
func TestReservedConcurrency(t *testing.T) {
	tests := []struct {
		variant string
		want    map[string]float64 // by function name; absent: no reservation
	}{
		{variant: prod},
		{variant: dev},
		{variant: multi2},
		{variant: admin, want: map[string]float64{"acquire": 50, "wait": 100, "renew": 50, "release": 20, "watch": 50, "lockset": 30, "locksetwait": 30}},
		{variant: tuned, want: map[string]float64{"acquire": 60, "wait": 80, "renew": 30, "release": 15, "watch": 50, "lockset": 30, "locksetwait": 30}},
	}
	for _, tt := range tests {
		for _, s := range synthStacks(t, tt.variant) {
			if len(s.ofType("AWS::Lambda::Function")) == 0 {
				continue // the global table's stack
			}
			t.Run(tt.variant+"/"+s.name, func(t *testing.T) {
				fns := s.functions(t)
				for _, name := range s.fnNames {
					got, ok := s.props(t, fns[name])["ReservedConcurrentExecutions"]
					want, wantOK := tt.want[name]
					if ok != wantOK || (ok && got != want) {
						t.Errorf("%s: got ReservedConcurrentExecutions %v (set %v), want %v (set %v)", name, got, ok, want, wantOK)
					}
				}
				if tt.want != nil {
					match(t, "wait's reservation", func() {
						s.tmpl.HasResourceProperties(jsii.String("AWS::Lambda::Function"), map[string]any{
							"Timeout":                      float64(wantTimeout["wait"]),
							"ReservedConcurrentExecutions": tt.want["wait"],
						})
					})
				}
			})
		}
	}
	// The account limit reserve=true needs, as docs/operations.md and
	// api/capacity.go state it: the sum plus the unreserved minimum.
	fns, err := Functions(api.Routes)
	if err != nil {
		t.Fatal(err)
	}
	sum := 0
	for _, f := range fns {
		sum += f.Reserve()
	}
	if got := sum + api.UnreservedMinimum; got != 430 || got > api.DefaultAccountConcurrency {
		t.Errorf("reserve=true needs an account limit of %d, want the documented 430 (within the default %d)",
			got, api.DefaultAccountConcurrency)
	}
}

func TestOutputs(t *testing.T) {
	for _, variant := range []string{prod, admin} {
		t.Run(variant, func(t *testing.T) { checkOutputs(t, synth(t, variant)) })
	}
}

func checkOutputs(t *testing.T, s *synthesized) {
	table := s.only(t, "AWS::DynamoDB::Table")
	match(t, "TableName output", func() {
		s.tmpl.HasOutput(jsii.String("TableName"), map[string]any{"Value": map[string]any{"Ref": table}})
	})
	url, _ := json.Marshal(s.out["ApiUrl"])
	if !strings.Contains(string(url), `"Ref":"`+s.only(t, "AWS::ApiGatewayV2::Api")+`"`) ||
		!strings.Contains(string(url), "execute-api") {
		t.Errorf("ApiUrl output: got %s, want the execute-api URL of the API", url)
	}
	// The invoke resources for lock users and for administrators, as the
	// template renders them (API ID as API_ID).
	httpAPI := s.only(t, "AWS::ApiGatewayV2::Api")
	type output struct {
		output string
		want   []string
	}
	outputs := []output{{output: "LockUserInvokeArns", want: []string{"API_ID/*/POST/locks/*", "API_ID/*/POST/locks/*/wait",
		"API_ID/*/GET/locks/*", "API_ID/*/DELETE/locks/*", "API_ID/*/POST/locks/*/renew", "API_ID/*/GET/locks/*/watch",
		"API_ID/*/POST/semaphores/*", "API_ID/*/POST/semaphores/*/wait", "API_ID/*/GET/semaphores/*", "API_ID/*/DELETE/semaphores/*",
		"API_ID/*/POST/semaphores/*/renew", "API_ID/*/GET/semaphores/*/watch",
		"API_ID/*/POST/rwlocks/*/read", "API_ID/*/POST/rwlocks/*/write", "API_ID/*/POST/rwlocks/*/read/wait",
		"API_ID/*/POST/rwlocks/*/write/wait", "API_ID/*/GET/rwlocks/*", "API_ID/*/DELETE/rwlocks/*", "API_ID/*/POST/rwlocks/*/renew",
		"API_ID/*/GET/rwlocks/*/watch", "API_ID/*/POST/locksets/*", "API_ID/*/POST/locksets/*/wait", "API_ID/*/POST/locksets/*/renew", "API_ID/*/DELETE/locksets/*"}}}
	if _, ok := s.out["AdminInvokeArns"]; ok { // TestAdminRoutes checks which variants have it
		outputs = append(outputs, output{output: "AdminInvokeArns",
			want: []string{"API_ID/*/GET/admin/locks", "API_ID/*/DELETE/admin/locks/*", "API_ID/*/GET/admin/semaphores",
				"API_ID/*/DELETE/admin/semaphores/*", "API_ID/*/GET/admin/rwlocks", "API_ID/*/DELETE/admin/rwlocks/*"}})
	}
	for _, tt := range outputs {
		got := joinedARNs(t, s.out[tt.output], httpAPI)
		var tails []string
		for _, arn := range got {
			if !strings.HasPrefix(arn, "arn:AWS::Partition:execute-api:AWS::Region:AWS::AccountId:") {
				t.Errorf("%s: %q is not an execute-api ARN of the stack's account and Region", tt.output, arn)
			}
			tails = append(tails, arn[strings.LastIndex(arn, ":")+1:])
		}
		if !slices.Equal(tails, tt.want) {
			t.Errorf("%s: got %v, want %v", tt.output, tails, tt.want)
		}
	}
}

// joinedARNs renders an output that is a comma-joined list of Fn::Join'ed
// ARNs as strings, with {"Ref": api} as API_ID and other Refs by name.
func joinedARNs(tb testing.TB, output any, api string) []string {
	tb.Helper()
	value, _ := output.(map[string]any)["Value"].(map[string]any)
	join, _ := value["Fn::Join"].([]any)
	if len(join) != 2 || join[0] != "," {
		tb.Fatalf("output %v: want a comma Fn::Join", output)
	}
	var arns []string
	for _, part := range strs(join[1]) {
		arns = append(arns, render(part, map[string]string{api: "API_ID"}))
	}
	return arns
}

// render turns a string, a Ref or an Fn::Join of them into one string:
// {"Ref": id} becomes names[id], or id itself (AWS::Region, …);
// {"Fn::GetAtt": [id, attr]} becomes "ATT(id)".
func render(v any, names map[string]string) string {
	switch v := v.(type) {
	case string:
		return v
	case map[string]any:
		if id, ok := v["Ref"].(string); ok {
			if n, ok := names[id]; ok {
				return n
			}
			return id
		}
		if ga, ok := v["Fn::GetAtt"].([]any); ok && len(ga) == 2 {
			return fmt.Sprintf("ATT(%v)", ga[0])
		}
		if j, ok := v["Fn::Join"].([]any); ok && len(j) == 2 {
			sep, _ := j[0].(string)
			var parts []string
			for _, p := range strs(j[1]) {
				parts = append(parts, render(p, names))
			}
			return strings.Join(parts, sep)
		}
	}
	return fmt.Sprintf("%v", v)
}

// TestNagReport reads the AwsSolutions report that every synth writes for
// each stack and fails on any unsuppressed error-level finding or
// reason-less suppression.
func TestNagReport(t *testing.T) {
	tests := []struct {
		variant   string
		wantAPIG4 string // Compliance of the AwsSolutions-APIG4 rows
	}{
		{variant: prod, wantAPIG4: "Compliant"},
		{variant: dev, wantAPIG4: "Suppressed"},
		{variant: multi2, wantAPIG4: "Compliant"},
		{variant: multi3, wantAPIG4: "Compliant"},
		{variant: admin, wantAPIG4: "Compliant"},
		{variant: tuned, wantAPIG4: "Compliant"},
	}
	for _, tt := range tests {
		for _, s := range synthStacks(t, tt.variant) {
			t.Run(tt.variant+"/"+s.name, func(t *testing.T) {
				checkNagReport(t, s, tt.wantAPIG4)
			})
		}
	}
}

func checkNagReport(t *testing.T, s *synthesized, wantAPIG4 string) {
	t.Helper()
	// The file is AwsSolutions-<stage prefix>-<stack>-NagReport.csv; an
	// App's prefix is empty.
	paths, _ := filepath.Glob(filepath.Join(s.outdir, "AwsSolutions-*-"+s.name+"-NagReport.csv"))
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
	if len(rows) < 1 || !slices.Equal(rows[0], wantHeader) {
		t.Fatalf("got report %v, want header %v", rows, wantHeader)
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
			if compliance != wantAPIG4 {
				t.Errorf("APIG4 on %s: got %s, want %s", resource, compliance, wantAPIG4)
			}
		}
	}
	wantRoutes := len(s.routes)
	if len(s.ofType("AWS::ApiGatewayV2::Api")) == 0 {
		wantRoutes = 0 // the global table's stack
	} else if len(rows) < 2 {
		t.Errorf("got no findings for a lock service stack")
	}
	if apig4 != wantRoutes {
		t.Errorf("got %d APIG4 findings, want one per route (%d)", apig4, wantRoutes)
	}
}

// globMatch reports whether an IAM resource pattern matches s: "*" matches
// any run of characters, "/" included, and "?" any one character.
func globMatch(pattern, s string) bool {
	if pattern == "" {
		return s == ""
	}
	switch pattern[0] {
	case '*':
		for i := 0; i <= len(s); i++ {
			if globMatch(pattern[1:], s[i:]) {
				return true
			}
		}
		return false
	case '?':
		return s != "" && globMatch(pattern[1:], s[1:])
	default:
		return s != "" && s[0] == pattern[0] && globMatch(pattern[1:], s[1:])
	}
}

// TestInvokeARNs checks, with IAM's wildcard rules, that the lock users'
// resources allow every lock route and no admin route, and the admins'
// resources every admin route and no lock route, for resource names that
// look like parts of other routes.
func TestInvokeARNs(t *testing.T) {
	t.Parallel()
	const prefix = "arn:aws:execute-api:eu-west-1:111122223333:a1b2c3"
	lock, admin := InvokeARNs(api.Routes, func(method, path string) string {
		return prefix + "/*/" + method + path
	})
	// request returns the ARN API Gateway checks for a request of r on the
	// $default stage with {resource} = name.
	request := func(r api.Route, name string) string {
		path := strings.ReplaceAll(strings.ReplaceAll(r.Path, "{resource}", name), "{name}", name)
		return prefix + "/$default/" + r.Method + path
	}
	allows := func(patterns []string, arn string) bool {
		return slices.ContainsFunc(patterns, func(p string) bool { return globMatch(p, arn) })
	}
	for _, name := range []string{"orders-db", "admin", "locks", "renew", "admin.locks", "semaphores", "admin.semaphores"} {
		for _, r := range api.Routes {
			arn := request(r, name)
			if got := allows(lock, arn); got == r.Admin {
				t.Errorf("lock users' resources %v allow %s: %v, want %v", lock, arn, got, !r.Admin)
			}
			if got := allows(admin, arn); got != r.Admin {
				t.Errorf("admins' resources %v allow %s: %v, want %v", admin, arn, got, r.Admin)
			}
		}
	}
	// Why each resource names its method: the shorter pattern would let
	// a lock user force-release.
	for _, r := range api.Routes {
		if r.Admin && r.Path == "/admin/locks/{resource}" && !globMatch(prefix+"/*/*/locks/*", request(r, "x")) {
			t.Errorf("want API_ID/*/*/locks/* to match the force release %s (IAM's * spans /)", request(r, "x"))
		}
	}
}
