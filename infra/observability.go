package main

import (
	"fmt"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/interfaces/interfacesawscloudwatch"
	"github.com/aws/jsii-runtime-go"

	"github.com/ft288/locks/api"
)

// The service's own metrics. Every function logs one CloudWatch Embedded
// Metric Format line per request in the namespace METRICS_NAMESPACE (the
// stack name), with the dimension sets [Route] and [Route, Outcome]; Route is
// the function's name (acquire, wait, status, release, renew, watch, admin),
// Outcome one of the outcomes below or another the handler names. The
// access log's metric filter adds MetricThrottled by DimRouteKey.
const (
	// MetricRequests counts requests (unit Count).
	MetricRequests = "Requests"
	// MetricLatency is the handler's time per request (Milliseconds).
	MetricLatency = "Latency"
	// MetricWaitTime is how long an acquire with wait_seconds waited
	// (Milliseconds).
	MetricWaitTime = "WaitTime"
	// DimRoute is the dimension that names the function.
	DimRoute = "Route"
	// DimOutcome is the dimension that names the request's outcome.
	DimOutcome = "Outcome"
	// MetricThrottled counts the requests API Gateway answered 429 (a
	// route over its throttle, or the account's bucket), from the access
	// log (a metric filter: the functions never see them), with the
	// dimension DimRouteKey.
	MetricThrottled = "Throttled"
	// DimRouteKey is the dimension that names an API route by its key,
	// e.g. "POST /locks/{resource}".
	DimRouteKey = "RouteKey"
)

// Outcomes the alarms and the dashboard read.
const (
	OutcomeContended   = "contended"   // acquire: held by another (200, acquired false)
	OutcomeUnavailable = "unavailable" // 503: the store throttled, failed or ran out of time; retryable
	OutcomeInternal    = "internal"    // 500: a bug or a misconfiguration (e.g. access denied)
	OutcomeNotFound    = "not-found"   // no live lease of that name
	OutcomeForbidden   = "forbidden"   // the lease is another owner's
	OutcomeStaleToken  = "stale-token" // the fencing token is not the lease's
)

// Alarm thresholds. Every alarm treats missing data as fine: no traffic is
// no trouble.
const (
	// UnavailableMinutes is how many minutes in a row must each see a 503
	// (outcome unavailable) before UnavailableAlarm fires: clients retry
	// a passing one (a throttle, a replicated write conflict).
	UnavailableMinutes = 5
	// LatencyP99Millis is the p99 handler latency, in milliseconds, above
	// which a one-store-call route (status, release, renew) is slow: a
	// DynamoDB call takes a few ms, so this means retries and backoff.
	LatencyP99Millis = 1000
	// LatencyMinutes and LatencyOfMinutes: the latency alarms fire when
	// LatencyMinutes of the last LatencyOfMinutes minutes were slow.
	LatencyMinutes   = 3
	LatencyOfMinutes = 5
	// LeaseLossThreshold is how many refused renewals (not-found,
	// forbidden, stale-token) in LeaseLossMinutes make LeaseLossAlarm fire:
	// each is a holder that learned too late that its lease had ended.
	LeaseLossThreshold = 5
	// LeaseLossMinutes is the LeaseLossAlarm's period.
	LeaseLossMinutes = 5
)

// leaseLossOutcomes are the answers to a renewal whose lease is gone.
var leaseLossOutcomes = []string{OutcomeNotFound, OutcomeForbidden, OutcomeStaleToken}

// tableOperations are the DynamoDB operations the functions call, and
// their names in the Operation dimension of DynamoDB's metrics.
var (
	tableOperations     = []awsdynamodb.Operation{awsdynamodb.Operation_GET_ITEM, awsdynamodb.Operation_UPDATE_ITEM, awsdynamodb.Operation_SCAN}
	tableOperationNames = []string{"GetItem", "UpdateItem", "Scan"}
)

// observability collects a stack's alarms and builds its dashboard.
type observability struct {
	stack     awscdk.Stack
	namespace string
	fns       []awslambda.Function
	names     []string
	alarms    []interfacesawscloudwatch.IAlarmRef
	// routeKeys are the deployed routes' keys, for the throttled graph.
	routeKeys []string
}

func newObservability(stack awscdk.Stack, namespace string) *observability {
	return &observability{stack: stack, namespace: namespace}
}

func minutes(n float64) awscdk.Duration { return awscdk.Duration_Minutes(jsii.Number(n)) }

// metric returns one of the service's metrics: name for route (and
// outcome, unless empty) with stat over period.
func (o *observability) metric(name, route, outcome, stat string, period awscdk.Duration) awscloudwatch.Metric {
	dims := map[string]*string{DimRoute: jsii.String(route)}
	label := route
	if outcome != "" {
		dims[DimOutcome] = jsii.String(outcome)
		label += " " + outcome
	}
	return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
		Namespace:     jsii.String(o.namespace),
		MetricName:    jsii.String(name),
		DimensionsMap: &dims,
		Statistic:     jsii.String(stat),
		Period:        period,
		Label:         jsii.String(label),
	})
}

// sumOf is the per-period sum of metrics, each read as 0 where it has no
// data (a route that saw no such outcome).
func sumOf(label string, period awscdk.Duration, metrics []awscloudwatch.IMetric) awscloudwatch.MathExpression {
	using := map[string]awscloudwatch.IMetric{}
	terms := make([]string, len(metrics))
	for i, m := range metrics {
		id := fmt.Sprintf("m%d", i)
		using[id] = m
		terms[i] = "FILL(" + id + ", 0)"
	}
	return awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
		Expression:   jsii.String(strings.Join(terms, " + ")),
		UsingMetrics: &using,
		Label:        jsii.String(label),
		Period:       period,
	})
}

// alarm adds an alarm on metric: threshold reached (>=) in datapoints of
// the last periods periods.
func (o *observability) alarm(id string, metric awscloudwatch.IMetric, threshold, datapoints, periods float64,
	description string) {
	a := awscloudwatch.NewAlarm(o.stack, jsii.String(id), &awscloudwatch.AlarmProps{
		Metric:             metric,
		Threshold:          jsii.Number(threshold),
		EvaluationPeriods:  jsii.Number(periods),
		DatapointsToAlarm:  jsii.Number(datapoints),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
		AlarmDescription:   jsii.String(description),
	})
	o.alarms = append(o.alarms, a)
}

// addFunction alarms on any error or throttle of fn in a minute.
func (o *observability) addFunction(f Function, fn awslambda.Function) {
	o.fns = append(o.fns, fn)
	o.names = append(o.names, f.Name)
	id := constructID(f.Name)
	period := &awscloudwatch.MetricOptions{Period: minutes(1)}
	o.alarm(id+"ErrorsAlarm", fn.MetricErrors(period), 1, 1, 1,
		fmt.Sprintf("The %s function returned errors (crashes or timeouts, not 4xx/5xx responses).", f.Name))
	o.alarm(id+"ThrottlesAlarm", fn.MetricThrottles(period), 1, 1, 1,
		fmt.Sprintf("The %s function was throttled (account or reserved concurrency exhausted).", f.Name))
}

// addThrottled counts the 429 answers in the API's access log (accessLogs,
// one JSON line per request) by route key: API Gateway answers them before
// any function runs, so only the access log sees them.
func (o *observability) addThrottled(accessLogs awslogs.ILogGroup, routes []api.Route) {
	awslogs.NewMetricFilter(o.stack, jsii.String("ThrottledFilter"), &awslogs.MetricFilterProps{
		LogGroup:        accessLogs,
		FilterPattern:   awslogs.FilterPattern_StringValue(jsii.String("$.status"), jsii.String("="), jsii.String("429")),
		MetricNamespace: jsii.String(o.namespace),
		MetricName:      jsii.String(MetricThrottled),
		MetricValue:     jsii.String("1"),
		Dimensions:      &map[string]*string{DimRouteKey: jsii.String("$.routeKey")},
		Unit:            awscloudwatch.Unit_COUNT,
	})
	for _, r := range routes {
		o.routeKeys = append(o.routeKeys, r.Key())
	}
}

// addAPIAndTable alarms on API 5xx responses and on DynamoDB throttling and
// system errors for the operations the functions use.
func (o *observability) addAPIAndTable(httpAPI awsapigatewayv2.HttpApi, table awsdynamodb.ITable) {
	period := minutes(1)
	o.alarm("Api5xxAlarm", httpAPI.MetricServerError(&awscloudwatch.MetricOptions{Period: period}), 1, 1, 1,
		"The lock API answered with 5xx (handler failures, integration errors or timeouts).")
	o.alarm("TableThrottlesAlarm",
		table.MetricThrottledRequestsForOperations(&awsdynamodb.OperationsMetricOptions{Operations: &tableOperations, Period: period}),
		1, 1, 1, "DynamoDB throttled GetItem/UpdateItem/Scan on the lock table.")
	o.alarm("TableSystemErrorsAlarm",
		table.MetricSystemErrorsForOperations(&awsdynamodb.SystemErrorsForOperationsMetricOptions{Operations: &tableOperations, Period: period}),
		1, 1, 1, "DynamoDB returned system errors (HTTP 500) for GetItem/UpdateItem/Scan on the lock table.")
}

// addServiceAlarms alarms on the service's own metrics: sustained 503s, any
// 500, slow one-store-call routes, and renewals refused for a lost lease.
func (o *observability) addServiceAlarms(fns []Function) {
	var unavailable, internal []awscloudwatch.IMetric
	for _, f := range fns {
		unavailable = append(unavailable, o.metric(MetricRequests, f.Name, OutcomeUnavailable, "Sum", minutes(1)))
		internal = append(internal, o.metric(MetricRequests, f.Name, OutcomeInternal, "Sum", minutes(1)))
	}
	o.alarm("UnavailableAlarm", sumOf("503 answers (unavailable)", minutes(1), unavailable),
		1, UnavailableMinutes, UnavailableMinutes,
		fmt.Sprintf("The lock service answered 503 (outcome unavailable) in each of %d minutes in a row: DynamoDB "+
			"throttles, fails or is slow (see the table alarms and the dashboard), or writes keep meeting "+
			"replicated write conflicts. Clients retry, but locks are not being granted or renewed in time.",
			UnavailableMinutes))
	o.alarm("InternalErrorsAlarm", sumOf("500 answers (internal)", minutes(1), internal), 1, 1, 1,
		"The lock service answered 500 (outcome internal): a bug or a misconfiguration such as a missing "+
			"permission or table. Read the function's log lines with level ERROR.")
	for _, f := range fns {
		if f.Timeout() != api.RouteTimeout {
			continue // wait and watch wait on purpose; admin may scan several pages
		}
		o.alarm(constructID(f.Name)+"LatencyAlarm", o.metric(MetricLatency, f.Name, "", "p99", minutes(1)),
			LatencyP99Millis, LatencyMinutes, LatencyOfMinutes,
			fmt.Sprintf("p99 latency of %s at or above %d ms in %d of %d minutes: DynamoDB calls are slow or being "+
				"retried. Slow renewals eat into the holders' safety margin.", f.Name, LatencyP99Millis, LatencyMinutes, LatencyOfMinutes))
	}
	var lost []awscloudwatch.IMetric
	for _, outcome := range leaseLossOutcomes {
		lost = append(lost, o.metric(MetricRequests, "renew", outcome, "Sum", minutes(LeaseLossMinutes)))
	}
	o.alarm("LeaseLossAlarm", sumOf("renewals refused (lease lost)", minutes(LeaseLossMinutes), lost),
		LeaseLossThreshold, 1, 1,
		fmt.Sprintf("At least %d renewals in %d minutes were refused (not-found, forbidden, stale-token): holders are "+
			"losing leases they still believe they hold, e.g. TTLs too short for their renewal interval, clients "+
			"paused (GC, CPU starvation) or slow renewals; look at renew latency and the clients.",
			LeaseLossThreshold, LeaseLossMinutes))
}

// newDashboard creates the stack's dashboard: the service's requests by
// outcome, latency, wait time and contention, its alarms, then the Lambda,
// API Gateway and DynamoDB metrics.
func (o *observability) newDashboard(fns []Function, httpAPI awsapigatewayv2.HttpApi, table awsdynamodb.ITable) {
	period := minutes(1)
	graph := func(title string, width float64, left []awscloudwatch.IMetric) awscloudwatch.IWidget {
		return awscloudwatch.NewGraphWidget(&awscloudwatch.GraphWidgetProps{
			Title: jsii.String(title), Width: jsii.Number(width), Height: jsii.Number(6), Left: &left, Period: period,
		})
	}
	rows := [][]awscloudwatch.IWidget{{awscloudwatch.NewTextWidget(&awscloudwatch.TextWidgetProps{
		Markdown: jsii.String(fmt.Sprintf("# Lock service %s\nRequests, latency and outcomes from the functions' "+
			"Embedded Metric Format lines (namespace `%s`), the alarms, then Lambda, API Gateway and DynamoDB.",
			o.namespace, o.namespace)),
		Width: jsii.Number(24), Height: jsii.Number(2),
	})}}

	// Requests by outcome, one graph per function: a search finds every
	// outcome the function has reported.
	var byOutcome []awscloudwatch.IWidget
	for _, f := range fns {
		search := awscloudwatch.NewSearchExpression(&awscloudwatch.SearchExpressionProps{
			Expression: jsii.String(fmt.Sprintf(`SEARCH('{"%s",%s,%s} MetricName="%s" %s="%s"', 'Sum', 60)`,
				o.namespace, DimRoute, DimOutcome, MetricRequests, DimRoute, f.Name)),
			Label: jsii.String("${PROP('Dim." + DimOutcome + "')}"),
		})
		byOutcome = append(byOutcome, graph("Requests by outcome: "+f.Name, 8, []awscloudwatch.IMetric{search}))
	}
	rows = append(rows, byOutcome)

	var p50, p99 []awscloudwatch.IMetric
	for _, f := range fns {
		p50 = append(p50, o.metric(MetricLatency, f.Name, "", "p50", period))
		p99 = append(p99, o.metric(MetricLatency, f.Name, "", "p99", period))
	}
	p99Widget := awscloudwatch.NewGraphWidget(&awscloudwatch.GraphWidgetProps{
		Title: jsii.String("Latency p99 by route (ms)"), Width: jsii.Number(12), Height: jsii.Number(6),
		Left: &p99, Period: period,
		LeftAnnotations: &[]*awscloudwatch.HorizontalAnnotation{{
			Value: jsii.Number(LatencyP99Millis), Label: jsii.String("alarm (status, release, renew)"),
		}},
	})
	rows = append(rows, []awscloudwatch.IWidget{graph("Latency p50 by route (ms)", 12, p50), p99Widget})

	contention := awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
		Expression: jsii.String("100 * FILL(contended, 0) / requests"),
		UsingMetrics: &map[string]awscloudwatch.IMetric{
			"contended": o.metric(MetricRequests, "acquire", OutcomeContended, "Sum", period),
			"requests":  o.metric(MetricRequests, "acquire", "", "Sum", period),
		},
		Label:  jsii.String("tries answered contended (%)"),
		Period: period,
	})
	rows = append(rows, []awscloudwatch.IWidget{
		graph("wait time of waiting acquires (ms, the wait function)", 12, []awscloudwatch.IMetric{
			o.metric(MetricWaitTime, "wait", "", "p50", period),
			o.metric(MetricWaitTime, "wait", "", "p99", period),
			o.metric(MetricWaitTime, "wait", "", "Maximum", period),
		}),
		graph("try-acquire contention rate (contended ÷ requests, %)", 12, []awscloudwatch.IMetric{contention}),
	})
	// The 429s API Gateway answered, by route (the access log's metric
	// filter): a route over its throttle, or the account's bucket.
	var gateway429 []awscloudwatch.IMetric
	for _, key := range o.routeKeys {
		gateway429 = append(gateway429, awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
			Namespace: jsii.String(o.namespace), MetricName: jsii.String(MetricThrottled),
			DimensionsMap: &map[string]*string{DimRouteKey: jsii.String(key)},
			Statistic:     jsii.String("Sum"), Period: period, Label: jsii.String(key),
		}))
	}
	rows = append(rows, []awscloudwatch.IWidget{
		graph("Throttled by API Gateway (429 by route, from the access log)", 24, gateway429),
	})

	rows = append(rows, []awscloudwatch.IWidget{awscloudwatch.NewAlarmStatusWidget(&awscloudwatch.AlarmStatusWidgetProps{
		Title: jsii.String("Alarms"), Alarms: &o.alarms, Width: jsii.Number(24),
	})})

	var errs, throttles, duration, concurrent []awscloudwatch.IMetric
	for i, fn := range o.fns {
		label := &awscloudwatch.MetricOptions{Label: jsii.String(o.names[i]), Period: period}
		errs = append(errs, fn.MetricErrors(label))
		throttles = append(throttles, fn.MetricThrottles(label))
		duration = append(duration, fn.MetricDuration(&awscloudwatch.MetricOptions{
			Label: jsii.String(o.names[i]), Period: period, Statistic: jsii.String("p99")}))
		concurrent = append(concurrent, fn.Metric(jsii.String("ConcurrentExecutions"), &awscloudwatch.MetricOptions{
			Label: jsii.String(o.names[i]), Period: period, Statistic: jsii.String("Maximum")}))
	}
	rows = append(rows, []awscloudwatch.IWidget{
		graph("Lambda errors", 6, errs),
		graph("Lambda throttles", 6, throttles),
		graph("Lambda duration p99 (ms)", 6, duration),
		graph("Lambda concurrent executions (max)", 6, concurrent),
	})

	opt := func(label, stat string) *awscloudwatch.MetricOptions {
		return &awscloudwatch.MetricOptions{Label: jsii.String(label), Period: period, Statistic: jsii.String(stat)}
	}
	rows = append(rows, []awscloudwatch.IWidget{
		graph("API requests", 8, []awscloudwatch.IMetric{httpAPI.MetricCount(opt("requests", "Sum"))}),
		graph("API 4xx and 5xx", 8, []awscloudwatch.IMetric{
			httpAPI.MetricClientError(opt("4xx", "Sum")), httpAPI.MetricServerError(opt("5xx", "Sum")),
		}),
		graph("API latency (ms)", 8, []awscloudwatch.IMetric{
			httpAPI.MetricLatency(opt("latency p50", "p50")), httpAPI.MetricLatency(opt("latency p99", "p99")),
			httpAPI.MetricIntegrationLatency(opt("integration p99", "p99")),
		}),
	})

	tableMetric := func(name, op string) awscloudwatch.IMetric {
		dims := map[string]*string{"TableName": table.TableName()}
		label := name
		if op != "" {
			dims["Operation"] = jsii.String(op)
			label = op
		}
		return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
			Namespace: jsii.String("AWS/DynamoDB"), MetricName: jsii.String(name), DimensionsMap: &dims,
			Statistic: jsii.String("Sum"), Period: period, Label: jsii.String(label),
		})
	}
	var throttled, sysErrs []awscloudwatch.IMetric
	for _, op := range tableOperationNames {
		throttled = append(throttled, tableMetric("ThrottledRequests", op))
		sysErrs = append(sysErrs, tableMetric("SystemErrors", op))
	}
	rows = append(rows, []awscloudwatch.IWidget{
		graph("DynamoDB consumed capacity (units per minute)", 8, []awscloudwatch.IMetric{
			tableMetric("ConsumedReadCapacityUnits", ""), tableMetric("ConsumedWriteCapacityUnits", ""),
		}),
		graph("DynamoDB throttled requests", 8, throttled),
		graph("DynamoDB system errors", 8, sysErrs),
	})

	widgets := make([]*[]awscloudwatch.IWidget, len(rows))
	for i := range rows {
		widgets[i] = &rows[i]
	}
	awscloudwatch.NewDashboard(o.stack, jsii.String("Dashboard"), &awscloudwatch.DashboardProps{
		Widgets:         &widgets,
		DefaultInterval: awscdk.Duration_Hours(jsii.Number(3)),
	})
}
