package api

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"
)

// NewLoggerTo returns the JSON logger of NewLogger writing to w. Its
// handler is slog's JSON handler, and it writes the one line per request of
// Handler itself: the same keys, without slog's generic machinery, which
// would be a tenth of a request's CPU time next to its DynamoDB call (make
// bench).
func NewLoggerTo(w io.Writer, level slog.Level) *slog.Logger {
	lw := &lockedWriter{w: w}
	return slog.New(&lineHandler{
		Handler: slog.NewJSONHandler(lw, &slog.HandlerOptions{Level: level}),
		w:       lw,
		level:   level,
	})
}

// lineHandler is slog's JSON handler plus a fast path for request lines.
type lineHandler struct {
	slog.Handler
	w     *lockedWriter
	level slog.Level
}

// lockedWriter serializes the writes of both paths (each one whole line),
// so lines never interleave whatever w is.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	n, err := l.w.Write(b)
	l.mu.Unlock()
	return n, err
}

// requestLine is what Handler logs about one request.
type requestLine struct {
	requestID, route, resource, outcome string
	status                              int
	latency                             time.Duration
	err                                 error // logged for 5xx answers only

	// The line's CloudWatch metrics (Embedded Metric Format): nil emf
	// means none.
	emf          *metricFormat
	name         string // the route's Name: the Route dimension
	metricResult string // the Outcome dimension (metricOutcome)
	waits        bool   // an acquire with wait_seconds > 0: WaitTime too
	waited       time.Duration
}

// metricFormat is the constant part of a request line's Embedded Metric
// Format directive for one namespace, rendered once per Handler, so that a
// line only appends its timestamp and values.
type metricFormat struct {
	namespace string
	// metrics, metricsWait: `,"CloudWatchMetrics":[…]}` closing the "_aws"
	// member, without and with the WaitTime metric.
	metrics, metricsWait string
}

// DefaultMetricsNamespace is the CloudWatch namespace of the request
// metrics unless METRICS_NAMESPACE says otherwise.
const DefaultMetricsNamespace = "LockService"

// newMetricFormat renders the directive of namespace. Dimensions are the
// route alone and the route with its outcome: never the resource name,
// which would make a metric per lock.
func newMetricFormat(namespace string) *metricFormat {
	directive := func(wait bool) string {
		b := []byte(`,"CloudWatchMetrics":[{"Namespace":`)
		b = appendJSONString(b, namespace)
		b = append(b, `,"Dimensions":[["Route"],["Route","Outcome"]],"Metrics":[{"Name":"Requests","Unit":"Count"},{"Name":"Latency","Unit":"Milliseconds"}`...)
		if wait {
			b = append(b, `,{"Name":"WaitTime","Unit":"Milliseconds"}`...)
		}
		return string(append(b, "]}]}"...))
	}
	return &metricFormat{namespace: namespace, metrics: directive(false), metricsWait: directive(true)}
}

// appendMetrics appends the line's metric members — the dimensions, the
// values and the "_aws" directive stamped with now — to a JSON object.
func (l *requestLine) appendMetrics(b []byte, now time.Time) []byte {
	b = append(b, `,"Route":`...)
	b = appendJSONString(b, l.name)
	b = append(b, `,"Outcome":`...)
	b = appendJSONString(b, l.metricResult)
	b = append(b, `,"Requests":1,"Latency":`...)
	b = strconv.AppendFloat(b, latencyMs(l.latency), 'f', -1, 64)
	if l.waits {
		b = append(b, `,"WaitTime":`...)
		b = strconv.AppendFloat(b, latencyMs(l.waited), 'f', -1, 64)
	}
	b = append(b, `,"_aws":`...)
	return l.directive(b, now)
}

// directive appends the value of the line's "_aws" member, stamped now.
func (l *requestLine) directive(b []byte, now time.Time) []byte {
	b = append(b, `{"Timestamp":`...)
	b = strconv.AppendInt(b, now.UnixMilli(), 10)
	if l.waits {
		return append(b, l.emf.metricsWait...)
	}
	return append(b, l.emf.metrics...)
}

// MetricOutcomes are the values of the Outcome dimension of the request
// metrics: what dashboards and alarms may select on.
var MetricOutcomes = []string{
	"acquired", "contended", "released", "renewed", "found", "not-found", "forbidden", "stale-token",
	"invalid", "unavailable", "internal", "listed", "force-released", "changed", "unchanged",
	"full", "permits-mismatch",
}

// metricOutcome is the Outcome dimension of a request's outcome: the
// domain outcomes as they are, the request's own faults as "invalid", the
// store's trouble as "unavailable".
func metricOutcome(outcome string) string {
	switch outcome {
	case "held":
		return "contended"
	case "validation-failed", "invalid-json", "payload-too-large":
		return "invalid"
	case "service-unavailable":
		return "unavailable"
	case "not-an-administrator":
		return "forbidden" // the admin routes have no other 403
	}
	return outcome
}

// attrs are line's attributes as slog sees them.
func (l *requestLine) attrs() []slog.Attr {
	attrs := []slog.Attr{
		slog.String("request_id", l.requestID),
		slog.String("route", l.route),
		slog.String("resource", l.resource),
		slog.String("outcome", l.outcome),
		slog.Int("status", l.status),
		slog.Float64("latency_ms", latencyMs(l.latency)),
	}
	if l.emf != nil {
		attrs = append(attrs, slog.String("Route", l.name), slog.String("Outcome", l.metricResult),
			slog.Int("Requests", 1), slog.Float64("Latency", latencyMs(l.latency)))
		if l.waits {
			attrs = append(attrs, slog.Float64("WaitTime", latencyMs(l.waited)))
		}
		attrs = append(attrs, slog.Any("_aws", json.RawMessage(l.directive(nil, time.Now()))))
	}
	if l.err != nil {
		attrs = append(attrs, slog.String("error", l.err.Error()))
	}
	return attrs
}

func latencyMs(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func (l *requestLine) level() slog.Level {
	if l.err != nil {
		return slog.LevelError
	}
	return slog.LevelInfo
}

var linePool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// write writes line as slog's JSON handler would (but the time in UTC with
// milliseconds), unless its level is below the handler's.
func (h *lineHandler) write(line *requestLine) {
	level := line.level()
	if level < h.level {
		return
	}
	bp := linePool.Get().(*[]byte)
	now := time.Now()
	b := append((*bp)[:0], `{"time":"`...)
	b = appendTime(b, now)
	b = append(b, `","level":"`...)
	b = append(b, level.String()...)
	b = append(b, `","msg":"request","request_id":`...)
	b = appendJSONString(b, line.requestID)
	b = append(b, `,"route":`...)
	b = appendJSONString(b, line.route)
	b = append(b, `,"resource":`...)
	b = appendJSONString(b, line.resource)
	b = append(b, `,"outcome":`...)
	b = appendJSONString(b, line.outcome)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(line.status), 10)
	b = append(b, `,"latency_ms":`...)
	b = strconv.AppendFloat(b, latencyMs(line.latency), 'f', -1, 64)
	if line.emf != nil {
		b = line.appendMetrics(b, now)
	}
	if line.err != nil {
		b = append(b, `,"error":`...)
		b = appendJSONString(b, line.err.Error())
	}
	b = append(b, "}\n"...)
	_, _ = h.w.Write(b)
	*bp = b
	linePool.Put(bp)
}

// logLine logs line to log: through the fast path when log is NewLoggerTo's,
// else as any slog record.
func logLine(ctx context.Context, log *slog.Logger, line *requestLine) {
	if lh, ok := log.Handler().(*lineHandler); ok {
		lh.write(line)
		return
	}
	// As Logger.LogAttrs does, but without looking up the caller's program
	// counter, which the handler does not print (no AddSource) and which
	// costs a stack walk on every request.
	h := log.Handler()
	if !h.Enabled(ctx, line.level()) {
		return
	}
	r := slog.NewRecord(time.Now(), line.level(), "request", 0)
	r.AddAttrs(line.attrs()...)
	_ = h.Handle(ctx, r)
}
