package api

import (
	"context"
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
	return slog.New(&lineHandler{
		Handler: slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}),
		w:       w,
		level:   level,
	})
}

// lineHandler is slog's JSON handler plus a fast path for request lines.
type lineHandler struct {
	slog.Handler
	mu    sync.Mutex
	w     io.Writer
	level slog.Level
}

// requestLine is what Handler logs about one request.
type requestLine struct {
	requestID, route, resource, outcome string
	status                              int
	latency                             time.Duration
	err                                 error // logged for 5xx answers only
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
	b := append((*bp)[:0], `{"time":"`...)
	b = appendTime(b, time.Now())
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
	if line.err != nil {
		b = append(b, `,"error":`...)
		b = appendJSONString(b, line.err.Error())
	}
	b = append(b, "}\n"...)
	h.mu.Lock()
	_, _ = h.w.Write(b)
	h.mu.Unlock()
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
