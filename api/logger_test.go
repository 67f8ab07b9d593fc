package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestRequestLine: NewLogger's fast request line carries what slog's JSON
// handler writes for the same record, and honours the level.
func TestRequestLine(t *testing.T) {
	lines := []requestLine{
		{requestID: "C3zNUjR9FiAEJxw=", route: "POST /locks/{resource}", resource: `job "7" <b>`, outcome: "acquired", status: 200, latency: 1234567 * time.Nanosecond},
		{requestID: "r2", route: "GET /locks/{resource}", resource: "x\u2028y", outcome: "service-unavailable", status: 503, latency: 3 * time.Second, err: errors.New(`store "t": timeout`)},
		// With metrics, as Handler logs: the slog path carries the same
		// members, the "_aws" directive included.
		{requestID: "r3", route: "POST /locks/{resource}", resource: "a", outcome: "held", status: 200, latency: 1500 * time.Microsecond,
			emf: newMetricFormat(`Lock "Service"`), name: "acquire", metricResult: "contended", waits: true, waited: 2345 * time.Millisecond},
		{requestID: "r4", route: "GET /admin/locks", outcome: "internal", status: 500, latency: time.Millisecond, err: errors.New("boom"),
			emf: newMetricFormat(DefaultMetricsNamespace), name: "admin", metricResult: "internal"},
	}
	for _, line := range lines {
		var fast, std bytes.Buffer
		logLine(context.Background(), NewLoggerTo(&fast, slog.LevelInfo), &line)
		logLine(context.Background(), slog.New(slog.NewJSONHandler(&std, nil)), &line)
		var got, want map[string]any
		if err := json.Unmarshal(fast.Bytes(), &got); err != nil || !strings.HasSuffix(fast.String(), "}\n") {
			t.Fatalf("fast line %q: %v", fast.String(), err)
		}
		if err := json.Unmarshal(std.Bytes(), &want); err != nil {
			t.Fatal(err)
		}
		if _, err := time.Parse(time.RFC3339, got["time"].(string)); err != nil {
			t.Errorf("time %v: %v", got["time"], err)
		}
		delete(got, "time")
		delete(want, "time")
		if line.emf != nil {
			// Stamped by each logger when it writes.
			for _, m := range []map[string]any{got, want} {
				aws := m["_aws"].(map[string]any)
				if ts := aws["Timestamp"].(float64); time.Since(time.UnixMilli(int64(ts))) > time.Minute {
					t.Errorf("_aws.Timestamp %v is not now", ts)
				}
				delete(aws, "Timestamp")
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("got  %v\nwant %v", got, want)
		}
	}
	var quiet bytes.Buffer
	log := NewLoggerTo(&quiet, slog.LevelWarn)
	logLine(context.Background(), log, &lines[0])
	if quiet.Len() != 0 {
		t.Errorf("an info line passed a warn level: %s", quiet.String())
	}
	logLine(context.Background(), log, &lines[1])
	if n := strings.Count(quiet.String(), "\n"); n != 1 {
		t.Errorf("got %d error lines, want 1", n)
	}
	// Other records go through slog as usual.
	log.Info("started", "table", "t")
	if strings.Contains(quiet.String(), "started") {
		t.Errorf("an info record passed a warn level: %s", quiet.String())
	}
}
