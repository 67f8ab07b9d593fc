package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/ft288/locks/api"
)

// wantLatencyAlarms are the functions with a p99 latency alarm: the quick
// ones, of one store call (wait and watch wait on purpose, admin may scan
// pages).
var wantLatencyAlarms = []string{"acquire", "status", "release", "renew"}

// alarmsByPrefix returns the alarms whose logical ID starts with prefix
// (the construct ID; the CDK appends a hash).
func (s *synthesized) alarmsByPrefix(prefix string) []string {
	var ids []string
	for _, id := range s.ofType("AWS::CloudWatch::Alarm") {
		if strings.HasPrefix(id, prefix) {
			ids = append(ids, id)
		}
	}
	return ids
}

// serviceStat is a MetricStat of the service's namespace in an alarm.
func serviceStat(namespace, metric, route, outcome, stat string, period int) map[string]any {
	dims := []any{}
	if outcome != "" {
		dims = append(dims, map[string]any{"Name": "Outcome", "Value": outcome})
	}
	dims = append(dims, map[string]any{"Name": "Route", "Value": route})
	return map[string]any{
		"Metric": map[string]any{"Namespace": namespace, "MetricName": metric, "Dimensions": dims},
		"Period": float64(period),
		"Stat":   stat,
	}
}

// checkSumAlarm checks the alarm with construct ID id: an expression that
// sums (each missing value as 0) exactly the given metric stats, with the
// threshold and "datapoints of periods".
func checkSumAlarm(t *testing.T, s *synthesized, id string, stats []map[string]any, threshold, datapoints, periods float64) {
	t.Helper()
	ids := s.alarmsByPrefix(id)
	if len(ids) != 1 {
		t.Fatalf("got alarms %v, want one %s", ids, id)
	}
	p := s.props(t, ids[0])
	for k, want := range map[string]any{"Threshold": threshold, "DatapointsToAlarm": datapoints,
		"EvaluationPeriods": periods, "ComparisonOperator": "GreaterThanOrEqualToThreshold",
		"TreatMissingData": "notBreaching"} {
		if p[k] != want {
			t.Errorf("%s %s: got %v, want %v", id, k, p[k], want)
		}
	}
	var expr string
	var terms []string
	got := map[string]any{}
	for _, m := range strs(p["Metrics"]) {
		m := m.(map[string]any)
		if e, ok := m["Expression"].(string); ok {
			if m["ReturnData"] != true {
				t.Errorf("%s: expression %q does not return data", id, e)
			}
			expr = e
			continue
		}
		if m["ReturnData"] != false {
			t.Errorf("%s: metric %v returns data, want only the sum", id, m["Id"])
		}
		mid := m["Id"].(string)
		got[mid] = m["MetricStat"]
		terms = append(terms, "FILL("+mid+", 0)")
	}
	slices.Sort(terms)
	gotTerms := strings.Split(expr, " + ")
	slices.Sort(gotTerms)
	if !slices.Equal(gotTerms, terms) {
		t.Errorf("%s: got expression %q, want the sum of FILL(m, 0) over its %d metrics", id, expr, len(terms))
	}
	var gotStats []string
	for _, st := range got {
		b, _ := json.Marshal(st)
		gotStats = append(gotStats, string(b))
	}
	var wantStats []string
	for _, st := range stats {
		b, _ := json.Marshal(st)
		wantStats = append(wantStats, string(b))
	}
	if !slices.Equal(sorted(gotStats), sorted(wantStats)) {
		t.Errorf("%s: got metrics\n%s\nwant\n%s", id, strings.Join(sorted(gotStats), "\n"), strings.Join(sorted(wantStats), "\n"))
	}
}

// TestAlarms checks the alarms of a stack without the admin API (the
// default) and with it: only the functions the stack has are alarmed on.
func TestAlarms(t *testing.T) {
	for _, variant := range []string{prod, admin} {
		t.Run(variant, func(t *testing.T) { checkAlarms(t, synth(t, variant)) })
	}
}

func checkAlarms(t *testing.T, s *synthesized) {
	match(t, "alarm count", func() {
		// Errors and Throttles per function, API 5xx, DynamoDB throttles
		// and system errors, unavailable, internal, p99 latency of the
		// one-store-call routes, lease loss.
		s.tmpl.ResourceCountIs(jsii.String("AWS::CloudWatch::Alarm"),
			jsii.Number(float64(2*len(s.fnNames)+3+2+len(wantLatencyAlarms)+1)))
	})
	table := s.only(t, "AWS::DynamoDB::Table")
	httpAPI := s.only(t, "AWS::ApiGatewayV2::Api")
	fns := s.functions(t)
	for _, name := range s.fnNames {
		for _, metric := range []string{"Errors", "Throttles"} {
			match(t, name+" "+metric+" alarm", func() {
				s.tmpl.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), map[string]any{
					"Namespace":  "AWS/Lambda",
					"MetricName": metric,
					"Dimensions": []any{map[string]any{"Name": "FunctionName", "Value": map[string]any{"Ref": fns[name]}}},
					"Threshold":  float64(1),
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
		for _, op := range []string{"GetItem", "UpdateItem", "Scan"} {
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

	ns := DefaultStackName
	t.Run("Unavailable", func(t *testing.T) {
		// A 503 of any function in each of 5 minutes in a row.
		var stats []map[string]any
		for _, name := range s.fnNames {
			stats = append(stats, serviceStat(ns, "Requests", name, "unavailable", "Sum", 60))
		}
		checkSumAlarm(t, s, "UnavailableAlarm", stats, 1, 5, 5)
	})
	t.Run("Internal", func(t *testing.T) {
		// Any 500 of any function in a minute.
		var stats []map[string]any
		for _, name := range s.fnNames {
			stats = append(stats, serviceStat(ns, "Requests", name, "internal", "Sum", 60))
		}
		checkSumAlarm(t, s, "InternalErrorsAlarm", stats, 1, 1, 1)
	})
	t.Run("LeaseLoss", func(t *testing.T) {
		// At least 5 refused renewals in 5 minutes.
		var stats []map[string]any
		for _, outcome := range []string{"not-found", "forbidden", "stale-token"} {
			stats = append(stats, serviceStat(ns, "Requests", "renew", outcome, "Sum", 300))
		}
		checkSumAlarm(t, s, "LeaseLossAlarm", stats, 5, 1, 1)
	})
	for _, name := range wantLatencyAlarms {
		t.Run("Latency/"+name, func(t *testing.T) {
			// p99 at or above 1 s in 3 of 5 minutes.
			ids := s.alarmsByPrefix(constructID(name) + "LatencyAlarm")
			if len(ids) != 1 {
				t.Fatalf("got latency alarms %v for %s, want 1", ids, name)
			}
			p := s.props(t, ids[0])
			want := map[string]any{"Threshold": float64(1000), "DatapointsToAlarm": float64(3),
				"EvaluationPeriods": float64(5), "ComparisonOperator": "GreaterThanOrEqualToThreshold"}
			for k, v := range want {
				if p[k] != v {
					t.Errorf("%s: got %v, want %v", k, p[k], v)
				}
			}
			metrics := strs(p["Metrics"])
			if len(metrics) != 1 {
				t.Fatalf("got metrics %v, want one", metrics)
			}
			got, _ := json.Marshal(metrics[0].(map[string]any)["MetricStat"])
			wantStat, _ := json.Marshal(serviceStat(ns, "Latency", name, "", "p99", 60))
			if string(got) != string(wantStat) {
				t.Errorf("got %s, want %s", got, wantStat)
			}
		})
	}
	for _, name := range []string{"wait", "watch", "admin"} {
		if ids := s.alarmsByPrefix(constructID(name) + "LatencyAlarm"); len(ids) != 0 {
			t.Errorf("%s has latency alarms %v, want none (it may wait or scan on purpose)", name, ids)
		}
	}
	if !slices.Contains(s.fnNames, "admin") {
		// No alarm names the absent admin function or its metrics.
		raw, _ := json.Marshal(s.res)
		if ids := s.alarmsByPrefix("Admin"); len(ids) != 0 || strings.Contains(string(raw), `"Value":"admin"`) {
			t.Errorf("a stack without the admin API alarms on it: alarms %v", ids)
		}
	}
}

// dashboard is a dashboard body as CloudWatch reads it.
type dashboard struct {
	Widgets []struct {
		Type       string
		Properties struct {
			Title    string
			Markdown string
			Metrics  [][]any
			Alarms   []string
		}
	}
}

// dashboardOf renders the one dashboard's body, a Fn::Join of strings and
// references, with {"Ref": id} as "REF(id)" and Fn::GetAtt as "ATT(id)",
// and parses it.
func (s *synthesized) dashboardOf(tb testing.TB) dashboard {
	tb.Helper()
	p := s.props(tb, s.only(tb, "AWS::CloudWatch::Dashboard"))
	if _, named := p["DashboardName"]; named {
		tb.Errorf("dashboard has a hard-coded name %v", p["DashboardName"])
	}
	join, _ := p["DashboardBody"].(map[string]any)["Fn::Join"].([]any)
	if len(join) != 2 {
		tb.Fatalf("DashboardBody: got %v, want an Fn::Join", p["DashboardBody"])
	}
	var b strings.Builder
	for _, part := range strs(join[1]) {
		if str, ok := part.(string); ok {
			b.WriteString(str)
		} else if id := findRef(part); id != "" && !strings.HasPrefix(id, "AWS::") {
			fmt.Fprintf(&b, "REF(%s)", id)
		} else {
			b.WriteString(render(part, nil))
		}
	}
	var d dashboard
	if err := json.Unmarshal([]byte(b.String()), &d); err != nil {
		tb.Fatalf("dashboard body %s: %v", b.String(), err)
	}
	return d
}

// series is one line of a graph: its namespace, metric name and dimensions
// as "Name=Value" in order, and its stat; or its expression.
type series struct {
	namespace, metric, stat, expr string
	dims                          []string
}

func parseSeries(m []any) series {
	var sr series
	if len(m) == 1 {
		opts, _ := m[0].(map[string]any)
		sr.expr, _ = opts["expression"].(string)
		return sr
	}
	sr.namespace, _ = m[0].(string)
	sr.metric, _ = m[1].(string)
	i := 2
	for ; i+1 < len(m); i += 2 {
		k, ok1 := m[i].(string)
		v, ok2 := m[i+1].(string)
		if !ok1 || !ok2 {
			break
		}
		sr.dims = append(sr.dims, k+"="+v)
	}
	if i < len(m) {
		opts, _ := m[i].(map[string]any)
		sr.stat, _ = opts["stat"].(string)
	}
	return sr
}

// graphs returns each metric widget's series by title.
func (d dashboard) graphs() map[string][]series {
	out := map[string][]series{}
	for _, w := range d.Widgets {
		if w.Type != "metric" {
			continue
		}
		for _, m := range w.Properties.Metrics {
			out[w.Properties.Title] = append(out[w.Properties.Title], parseSeries(m))
		}
	}
	return out
}

// has reports whether l holds a series of namespace and metric with stat
// whose dimensions include dims.
func has(l []series, namespace, metric, stat string, dims ...string) bool {
	return slices.ContainsFunc(l, func(s series) bool {
		if s.namespace != namespace || s.metric != metric || s.stat != stat {
			return false
		}
		for _, d := range dims {
			if !slices.Contains(s.dims, d) {
				return false
			}
		}
		return true
	})
}

// TestDashboard checks the dashboard of a stack without the admin API (the
// default) and with it: it graphs exactly the functions the stack has.
func TestDashboard(t *testing.T) {
	for _, variant := range []string{prod, admin} {
		t.Run(variant, func(t *testing.T) { checkDashboard(t, synth(t, variant)) })
	}
}

func checkDashboard(t *testing.T, s *synthesized) {
	d := s.dashboardOf(t)
	g := d.graphs()
	ns := DefaultStackName
	fns := s.functions(t)
	httpAPI := s.only(t, "AWS::ApiGatewayV2::Api")
	table := s.only(t, "AWS::DynamoDB::Table")

	t.Run("RequestsByOutcome", func(t *testing.T) {
		for _, name := range s.fnNames {
			l := g["Requests by outcome: "+name]
			want := fmt.Sprintf(`SEARCH('{"%s",Route,Outcome} MetricName="Requests" Route="%s"', 'Sum', 60)`, ns, name)
			if len(l) != 1 || l[0].expr != want {
				t.Errorf("%s: got %+v, want the search %s", name, l, want)
			}
		}
	})
	t.Run("Latency", func(t *testing.T) {
		for _, stat := range []string{"p50", "p99"} {
			l := g["Latency "+stat+" by route (ms)"]
			for _, name := range s.fnNames {
				if !has(l, ns, "Latency", stat, "Route="+name) {
					t.Errorf("no %s Latency of %s in %+v", stat, name, l)
				}
			}
		}
	})
	t.Run("OnlyItsFunctions", func(t *testing.T) {
		// No graph for a function the stack does not have (admin, without
		// administrators).
		n := 0
		for title := range g {
			if strings.HasPrefix(title, "Requests by outcome: ") {
				n++
			}
		}
		if n != len(s.fnNames) || len(g["Lambda errors"]) != len(s.fnNames) {
			t.Errorf("got %d outcome graphs and %d Lambda error series, want one per function %v",
				n, len(g["Lambda errors"]), s.fnNames)
		}
	})
	t.Run("WaitTime", func(t *testing.T) {
		l := g["wait time of waiting acquires (ms, the wait function)"]
		for _, stat := range []string{"p50", "p99", "Maximum"} {
			if !has(l, ns, "WaitTime", stat, "Route=wait") {
				t.Errorf("no %s WaitTime of wait in %+v", stat, l)
			}
		}
	})
	t.Run("Throttled", func(t *testing.T) {
		// 429s by route key, from the access log's metric filter: one
		// series per deployed route.
		l := g["Throttled by API Gateway (429 by route, from the access log)"]
		for _, r := range s.routes {
			if !has(l, ns, MetricThrottled, "Sum", DimRouteKey+"="+r.Key()) {
				t.Errorf("no Throttled of %s in %+v", r.Key(), l)
			}
		}
		if len(l) != len(s.routes) {
			t.Errorf("got %d series, want one per route (%d)", len(l), len(s.routes))
		}
		stage := s.props(t, s.only(t, "AWS::ApiGatewayV2::Stage"))
		accessLogs := getAtt(stage["AccessLogSettings"].(map[string]any)["DestinationArn"], "Arn")
		f := s.props(t, s.only(t, "AWS::Logs::MetricFilter"))
		if findRef(f["LogGroupName"]) != accessLogs {
			t.Errorf("metric filter on %v, want the access log group %s", f["LogGroupName"], accessLogs)
		}
		if f["FilterPattern"] != `{ $.status = "429" }` {
			t.Errorf("filter pattern %v, want the access log lines of status 429", f["FilterPattern"])
		}
		tr, _ := json.Marshal(f["MetricTransformations"])
		want, _ := json.Marshal([]any{map[string]any{
			"Dimensions":      []any{map[string]any{"Key": DimRouteKey, "Value": "$.routeKey"}},
			"MetricName":      MetricThrottled,
			"MetricNamespace": ns,
			"MetricValue":     "1",
			"Unit":            "Count",
		}})
		if string(tr) != string(want) {
			t.Errorf("metric transformation %s, want %s", tr, want)
		}
		// The access log line has the members the filter reads.
		var fields map[string]string
		_ = json.Unmarshal([]byte(stage["AccessLogSettings"].(map[string]any)["Format"].(string)), &fields)
		if fields["status"] != "$context.status" || fields["routeKey"] != "$context.routeKey" {
			t.Errorf("access log format %v lacks status or routeKey", fields)
		}
	})
	t.Run("Contention", func(t *testing.T) {
		l := g["try-acquire contention rate (contended ÷ requests, %)"]
		if !slices.ContainsFunc(l, func(s series) bool { return s.expr == "100 * FILL(contended, 0) / requests" }) ||
			!has(l, ns, "Requests", "Sum", "Outcome=contended", "Route=acquire") ||
			!has(l, ns, "Requests", "Sum", "Route=acquire") {
			t.Errorf("contention: got %+v, want 100 × contended acquires ÷ acquires", l)
		}
	})
	t.Run("Lambda", func(t *testing.T) {
		for title, want := range map[string][2]string{
			"Lambda errors":                      {"Errors", "Sum"},
			"Lambda throttles":                   {"Throttles", "Sum"},
			"Lambda duration p99 (ms)":           {"Duration", "p99"},
			"Lambda concurrent executions (max)": {"ConcurrentExecutions", "Maximum"},
		} {
			for _, name := range s.fnNames {
				if !has(g[title], "AWS/Lambda", want[0], want[1], "FunctionName=REF("+fns[name]+")") {
					t.Errorf("%s: no %s of %s in %+v", title, want[0], name, g[title])
				}
			}
		}
	})
	t.Run("APIGateway", func(t *testing.T) {
		apiDim := "ApiId=REF(" + httpAPI + ")"
		for _, c := range []struct{ title, metric, stat string }{
			{"API requests", "Count", "Sum"},
			{"API 4xx and 5xx", "4xx", "Sum"},
			{"API 4xx and 5xx", "5xx", "Sum"},
			{"API latency (ms)", "Latency", "p99"},
			{"API latency (ms)", "IntegrationLatency", "p99"},
		} {
			if !has(g[c.title], "AWS/ApiGateway", c.metric, c.stat, apiDim) {
				t.Errorf("%s: no %s %s of the API in %+v", c.title, c.stat, c.metric, g[c.title])
			}
		}
	})
	t.Run("DynamoDB", func(t *testing.T) {
		tableDim := "TableName=REF(" + table + ")"
		l := g["DynamoDB consumed capacity (units per minute)"]
		for _, m := range []string{"ConsumedReadCapacityUnits", "ConsumedWriteCapacityUnits"} {
			if !has(l, "AWS/DynamoDB", m, "Sum", tableDim) {
				t.Errorf("no %s of the table in %+v", m, l)
			}
		}
		for title, m := range map[string]string{"DynamoDB throttled requests": "ThrottledRequests", "DynamoDB system errors": "SystemErrors"} {
			for _, op := range []string{"GetItem", "UpdateItem", "Scan"} {
				if !has(g[title], "AWS/DynamoDB", m, "Sum", tableDim, "Operation="+op) {
					t.Errorf("%s: no %s of %s in %+v", title, m, op, g[title])
				}
			}
		}
	})
	t.Run("Alarms", func(t *testing.T) {
		// The alarm widget shows every alarm of the stack.
		var shown []string
		for _, w := range d.Widgets {
			if w.Type == "alarm" {
				shown = append(shown, w.Properties.Alarms...)
			}
		}
		var want []string
		for _, id := range s.ofType("AWS::CloudWatch::Alarm") {
			want = append(want, "ATT("+id+")")
		}
		if !slices.Equal(sorted(shown), want) {
			t.Errorf("alarm widget: got %v, want every alarm %v", sorted(shown), want)
		}
	})
	t.Run("OneLineOfEMFPerMetric", func(t *testing.T) {
		// Every service metric the dashboard or an alarm reads is one of
		// the three the handlers emit, in the stack's namespace, or the
		// access log's count of 429s.
		for title, l := range g {
			for _, sr := range l {
				if sr.namespace == ns && !slices.Contains([]string{"Requests", "Latency", "WaitTime", MetricThrottled}, sr.metric) {
					t.Errorf("%s: metric %s is not one the functions emit", title, sr.metric)
				}
				if sr.namespace != ns && !strings.HasPrefix(sr.namespace, "AWS/") && sr.expr == "" {
					t.Errorf("%s: namespace %q is neither the stack's nor AWS's", title, sr.namespace)
				}
			}
		}
	})
}

// TestOutcomesAreEmitted checks that every outcome the alarms and the
// dashboard select on is one the handlers report (api.MetricOutcomes).
func TestOutcomesAreEmitted(t *testing.T) {
	t.Parallel()
	for _, o := range append([]string{OutcomeContended, OutcomeUnavailable, OutcomeInternal}, leaseLossOutcomes...) {
		if !slices.Contains(api.MetricOutcomes, o) {
			t.Errorf("outcome %q is not in api.MetricOutcomes %v", o, api.MetricOutcomes)
		}
	}
	fns, err := Functions(api.Routes)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fns {
		if !slices.Contains(wantFunctions, f.Name) {
			t.Errorf("function %s is not a Route value the alarms know", f.Name)
		}
	}
}
