// Package faultproxy is an HTTP proxy between the lock service and a
// DynamoDB-compatible server (dynalite) that injects the faults a real store
// and network produce: delays, throttling and 5xx answers, writes applied
// whose answer is lost, cut off or reset, requests never answered, and writes
// held back and applied only after their caller gave up (late delivery).
//
// Each request is decided by a Plan (a scripted one in regression tests, a
// seeded random Schedule under chaos) and recorded with the answer the store
// really gave, so a checker knows which writes committed and when. The proxy
// never lets a caller's disconnect abort a request to the store: it forwards
// with its own context (dynalite dies on a request aborted mid-flight).
package faultproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Fault is one kind of injected failure.
type Fault int

// The faults. Those named "Applied" forward the request to the store first,
// so its write (if any) commits, and then fail the answer; the others fail it
// without the store seeing the request, except Late, which forwards it after
// the caller gave up.
const (
	None Fault = iota
	// Delay forwards the request after Action.Delay.
	Delay
	// InternalError answers 500 InternalServerError without forwarding.
	InternalError
	// Throttle answers 400 ThrottlingException without forwarding.
	Throttle
	// ThroughputExceeded answers 400 ProvisionedThroughputExceededException
	// without forwarding.
	ThroughputExceeded
	// AppliedThen500 forwards the request, then answers 500.
	AppliedThen500
	// AppliedThenReset forwards the request, then closes the connection
	// without an answer.
	AppliedThenReset
	// AppliedThenCut forwards the request, then sends the store's status and
	// headers and half of its body before closing the connection.
	AppliedThenCut
	// Blackhole never answers and never forwards: the caller gives up.
	Blackhole
	// Late holds the request until the caller gave up (and Action.Hold, when
	// set, is closed), then forwards it: a write that lands after its
	// request was answered 503.
	Late
	numFaults
)

var faultNames = [...]string{"none", "delay", "500", "throttle", "throughput", "applied-500", "applied-reset", "applied-cut", "blackhole", "late"}

// String returns the fault's short name, as the chaos summary prints it.
func (f Fault) String() string {
	if f < 0 || f >= numFaults {
		return fmt.Sprintf("fault(%d)", int(f))
	}
	return faultNames[f]
}

// Faults lists every fault but None.
func Faults() []Fault {
	out := make([]Fault, 0, numFaults-1)
	for f := Delay; f < numFaults; f++ {
		out = append(out, f)
	}
	return out
}

// Action is what the proxy does with one request.
type Action struct {
	Fault Fault
	// Delay is waited before forwarding (Delay) or before the late forward
	// (Late, after the caller gave up).
	Delay time.Duration
	// Hold, for Late, is closed by the test when the held request may go.
	Hold <-chan struct{}
	// Answered, when set, is closed once the store has answered (None and
	// Delay only), so a test learns that the store decided; HoldAnswer,
	// when set, is then waited for before the answer goes back.
	Answered   chan struct{}
	HoldAnswer <-chan struct{}
}

// Request is what a Plan sees of one request.
type Request struct {
	// Seq numbers requests from 1 in arrival order.
	Seq int
	// Op is the DynamoDB operation, e.g. "UpdateItem" (from X-Amz-Target).
	Op string
	// Body is the JSON request body.
	Body []byte
}

// Plan decides the Action for each request. It is called concurrently.
type Plan func(Request) Action

// Record is one request as the proxy handled it.
type Record struct {
	Seq   int
	Op    string
	Body  []byte
	Fault Fault
	// Received is when the proxy got the request.
	Received time.Time
	// Forwarded says the store received it; Sent and Answered bound when
	// the store applied it (zero when not forwarded).
	Forwarded      bool
	Sent, Answered time.Time
	// StoreStatus and StoreBody are the store's real answer; ForwardErr is
	// set when the store could not be reached.
	StoreStatus int
	StoreBody   []byte
	ForwardErr  string
	// OldItem is, in old-item mode (SetOldItemOnFailure), the item the
	// proxy read and added to this write's refusal (its JSON attribute
	// map; nil when it added none: the item was absent, or the write was
	// not refused).
	OldItem []byte
	// CallerStatus is what the caller was sent (0 when it got no answer).
	CallerStatus int
}

// Committed reports whether the store applied a write for this record:
// forwarded, answered 200 (a failed condition is 400).
func (r Record) Committed() bool { return r.Forwarded && r.StoreStatus == http.StatusOK }

// Proxy forwards to a store and injects the faults its Plan chooses.
type Proxy struct {
	target string
	plan   Plan
	client *http.Client

	mu      sync.Mutex
	seq     int
	records []*Record
	pending sync.WaitGroup

	srv *http.Server
	ln  net.Listener

	oldItem atomic.Bool
}

// New starts a proxy on a free loopback port in front of the store at
// target (a base URL such as http://127.0.0.1:4567). A nil plan forwards
// everything untouched.
func New(target string, plan Plan) (*Proxy, error) {
	return Listen("127.0.0.1:0", target, plan)
}

// Listen is New on the address addr (host:port; port 0 picks a free one),
// for a proxy run standalone in front of an endpoint (cmd/chaos -proxy).
func Listen(addr, target string, plan Plan) (*Proxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	// Keep connections to the store: a chaos run sends hundreds of
	// requests a second, and the default of 2 idle connections per host
	// would open (and leave in TIME_WAIT) one for nearly each.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	p := &Proxy{
		target: strings.TrimSuffix(target, "/"),
		plan:   plan,
		client: &http.Client{Timeout: 30 * time.Second, Transport: tr},
		ln:     ln,
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go p.srv.Serve(ln)
	return p, nil
}

// URL returns the proxy's base URL, to give the service as its endpoint.
func (p *Proxy) URL() string { return "http://" + p.ln.Addr().String() }

// SetPlan replaces the plan for requests that arrive from now on.
func (p *Proxy) SetPlan(plan Plan) {
	p.mu.Lock()
	p.plan = plan
	p.mu.Unlock()
}

// SetOldItemOnFailure turns old-item mode on or off for requests that
// arrive from now on. In old-item mode the proxy answers a write refused
// by its condition as DynamoDB does when the write asked for it
// (ReturnValuesOnConditionCheckFailure ALL_OLD), which dynalite ignores:
// it reads the item with a strongly consistent GetItem after the store's
// refusal and adds it to the ConditionalCheckFailedException as its Item
// member (nothing when the item is absent). The read is not atomic with
// the refusal, as DynamoDB's old item is: a write that lands between the
// two shows in the item returned, so the caller may see a later item than
// the one its condition failed on (a view DynamoDB would never give,
// though one the caller could reach with a read of its own). A read that
// fails turns the answer into a 500 (the write was refused: a retry is
// harmless). The read is no Record of its own; Record.OldItem keeps the
// item added.
func (p *Proxy) SetOldItemOnFailure(on bool) { p.oldItem.Store(on) }

// Close stops accepting requests and waits for held and late requests to
// reach the store (or give up), so no write is still in flight.
func (p *Proxy) Close() error {
	err := p.srv.Close()
	p.pending.Wait()
	p.client.CloseIdleConnections()
	return err
}

// Settle waits until every request received so far has been forwarded or
// dropped, so Records is complete.
func (p *Proxy) Settle() { p.pending.Wait() }

// Records returns a copy of every record so far, in arrival order.
func (p *Proxy) Records() []Record {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Record, len(p.records))
	for i, r := range p.records {
		out[i] = *r
	}
	return out
}

// Counts returns how many requests got each fault.
func (p *Proxy) Counts() map[Fault]int {
	out := map[Fault]int{}
	for _, r := range p.Records() {
		out[r.Fault]++
	}
	return out
}

// ServeHTTP handles one request from the service.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.pending.Add(1)
	defer p.pending.Done()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	op := r.Header.Get("X-Amz-Target")
	if i := strings.LastIndexByte(op, '.'); i >= 0 {
		op = op[i+1:]
	}
	p.mu.Lock()
	p.seq++
	rec := &Record{Seq: p.seq, Op: op, Body: body, Received: time.Now()}
	p.records = append(p.records, rec)
	plan := p.plan
	p.mu.Unlock()

	act := Action{}
	if plan != nil {
		act = plan(Request{Seq: rec.Seq, Op: op, Body: body})
	}
	p.setFault(rec, act.Fault)

	switch act.Fault {
	case Delay:
		select {
		case <-time.After(act.Delay):
		case <-r.Context().Done():
			// The caller gave up while the request was delayed; it still
			// reaches the store, as a slow network would deliver it.
		}
	case InternalError:
		p.answerError(w, rec, 500, "com.amazonaws.dynamodb.v20120810#InternalServerError", "Internal server error")
		return
	case Throttle:
		p.answerError(w, rec, 400, "com.amazonaws.dynamodb.v20120810#ThrottlingException", "Rate of requests exceeds the allowed throughput.")
		return
	case ThroughputExceeded:
		p.answerError(w, rec, 400, "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
			"The level of configured provisioned throughput for the table was exceeded. Consider increasing your provisioning level with the UpdateTable API.")
		return
	case Blackhole:
		<-r.Context().Done()
		return
	case Late:
		<-r.Context().Done()
		if act.Hold != nil {
			<-act.Hold
		}
		if act.Delay > 0 {
			time.Sleep(act.Delay)
		}
	}

	status, header, storeBody := p.forward(rec, r.Header, body)
	if status != 0 && p.oldItem.Load() {
		var err error
		if storeBody, err = p.addOldItem(rec, r.Header, body, status, storeBody); err != nil {
			p.answerError(w, rec, 500, "com.amazonaws.dynamodb.v20120810#InternalServerError", "faultproxy: old item: "+err.Error())
			return
		}
	}
	if status == 0 || act.Fault == Late || r.Context().Err() != nil {
		// Unreachable store, or nobody is listening any more: the caller
		// gets no answer (its connection is closed).
		hijackClose(w)
		return
	}
	switch act.Fault {
	case AppliedThen500:
		p.answerError(w, rec, 500, "com.amazonaws.dynamodb.v20120810#InternalServerError", "Internal server error")
	case AppliedThenReset:
		hijackClose(w)
	case AppliedThenCut:
		p.cut(w, rec, status, header, storeBody)
	default:
		if act.Answered != nil {
			close(act.Answered)
		}
		if act.HoldAnswer != nil {
			<-act.HoldAnswer
		}
		copyHeader(w.Header(), header)
		// The old item may have grown the body: its length and DynamoDB's
		// checksum of it (which the SDK checks) follow.
		w.Header().Del("Content-Length")
		if w.Header().Get("X-Amz-Crc32") != "" {
			w.Header().Set("X-Amz-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE(storeBody)), 10))
		}
		w.WriteHeader(status)
		_, _ = w.Write(storeBody)
		p.setCallerStatus(rec, status)
	}
}

func (p *Proxy) setFault(rec *Record, f Fault) {
	p.mu.Lock()
	rec.Fault = f
	p.mu.Unlock()
}

func (p *Proxy) setCallerStatus(rec *Record, status int) {
	p.mu.Lock()
	rec.CallerStatus = status
	p.mu.Unlock()
}

// forward sends the request to the store with the proxy's own context and
// records the store's answer.
func (p *Proxy) forward(rec *Record, h http.Header, body []byte) (int, http.Header, []byte) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, p.target+"/", bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil
	}
	copyHeader(req.Header, h)
	req.Header.Del("Content-Length")
	sent := time.Now()
	resp, err := p.client.Do(req)
	var data []byte
	if err == nil {
		data, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	rec.Forwarded, rec.Sent, rec.Answered = true, sent, time.Now()
	if err != nil {
		rec.ForwardErr = err.Error()
		return 0, nil, nil
	}
	rec.StoreStatus, rec.StoreBody = resp.StatusCode, data
	return resp.StatusCode, resp.Header, data
}

// oldItemOps are the writes that take ReturnValuesOnConditionCheckFailure.
var oldItemOps = map[string]bool{"UpdateItem": true, "PutItem": true, "DeleteItem": true}

// addOldItem returns the store's answer to a write as DynamoDB would give
// it in old-item mode: a refusal of a write that asked for the old item
// (ReturnValuesOnConditionCheckFailure ALL_OLD) with the item, read now,
// as the exception's Item member; any other answer as it is.
func (p *Proxy) addOldItem(rec *Record, h http.Header, body []byte, status int, storeBody []byte) ([]byte, error) {
	if status != http.StatusBadRequest || !oldItemOps[rec.Op] {
		return storeBody, nil
	}
	var req struct {
		TableName                           string
		Key                                 json.RawMessage
		ReturnValuesOnConditionCheckFailure string
	}
	if json.Unmarshal(body, &req) != nil || req.ReturnValuesOnConditionCheckFailure != "ALL_OLD" {
		return storeBody, nil
	}
	var ans map[string]json.RawMessage
	if json.Unmarshal(storeBody, &ans) != nil {
		return storeBody, nil
	}
	var typ string
	_ = json.Unmarshal(ans["__type"], &typ)
	if typ[strings.LastIndexByte(typ, '#')+1:] != "ConditionalCheckFailedException" {
		return storeBody, nil
	}
	get, err := json.Marshal(map[string]any{"TableName": req.TableName, "Key": req.Key, "ConsistentRead": true})
	if err != nil {
		return nil, err
	}
	gh := h.Clone()
	gh.Set("X-Amz-Target", "DynamoDB_20120810.GetItem")
	gh.Del("Content-Length")
	hreq, err := http.NewRequestWithContext(context.Background(), http.MethodPost, p.target+"/", bytes.NewReader(get))
	if err != nil {
		return nil, err
	}
	hreq.Header = gh
	resp, err := p.client.Do(hreq)
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GetItem answered %d: %s", resp.StatusCode, data)
	}
	var got struct{ Item json.RawMessage }
	if err := json.Unmarshal(data, &got); err != nil {
		return nil, err
	}
	if len(got.Item) == 0 || string(got.Item) == "null" {
		return storeBody, nil // absent: DynamoDB returns no item either
	}
	ans["Item"] = got.Item
	out, err := json.Marshal(ans)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	rec.OldItem = got.Item
	p.mu.Unlock()
	return out, nil
}

// answerError answers as DynamoDB does for a service-side error.
func (p *Proxy) answerError(w http.ResponseWriter, rec *Record, status int, typ, msg string) {
	b, _ := json.Marshal(map[string]string{"__type": typ, "message": msg})
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amzn-Requestid", fmt.Sprintf("faultproxy-%d", rec.Seq))
	w.WriteHeader(status)
	_, _ = w.Write(b)
	p.setCallerStatus(rec, status)
}

// cut sends the status, the headers (with the full Content-Length) and half
// of the body, then closes the connection: the caller sees the body end early.
func (p *Proxy) cut(w http.ResponseWriter, rec *Record, status int, header http.Header, body []byte) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		return
	}
	conn, buf, err := hj.Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	fmt.Fprintf(buf, "HTTP/1.1 %d %s\r\n", status, http.StatusText(status))
	for k, vs := range header {
		if strings.EqualFold(k, "Content-Length") || strings.EqualFold(k, "Transfer-Encoding") || strings.EqualFold(k, "Connection") {
			continue
		}
		for _, v := range vs {
			fmt.Fprintf(buf, "%s: %s\r\n", k, v)
		}
	}
	fmt.Fprintf(buf, "Content-Length: %d\r\n\r\n", len(body))
	_, _ = buf.Write(body[:len(body)/2])
	_ = buf.Flush()
	p.setCallerStatus(rec, status)
}

// hijackClose drops the caller's connection without an answer.
func hijackClose(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			if tc, ok := conn.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // a reset, not a clean close
			}
			conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

func copyHeader(dst, src http.Header) {
	for k, vs := range src {
		for _, v := range vs {
			dst.Add(k, v)
		}
	}
}
