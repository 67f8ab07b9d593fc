package local

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ft288/locks/api"
)

// maxPayloadBytes is API Gateway's request payload limit (10 MB).
const maxPayloadBytes = 10 << 20

// IntegrationTimeout is API Gateway's limit on one Lambda integration (30 s):
// no handler call gets a later deadline, whatever its route's timeout.
const IntegrationTimeout = api.IntegrationTimeout

// IdentityFunc returns the IAM identity to put into a request's
// requestContext.authorizer.iam, as API Gateway's IAM authorizer would, or
// nil for none.
type IdentityFunc func(r *http.Request) *events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription

// Runner serves api.Routes over plain HTTP the way an API Gateway HTTP API
// with Lambda proxy integrations (payload format 2.0) would: it builds the
// event, calls the route's handler, and writes the handler's response. With
// SetCapacity it also models the stack's route throttles and Lambda's
// concurrency limits, refusing what they would refuse.
type Runner struct {
	handler *api.Handler
	log     *slog.Logger
	// Identity, when set, attaches an IAM identity to each request. It is
	// for tests of principal binding; the default (nil) attaches none.
	Identity IdentityFunc
	// Now is API Gateway's clock, which stamps each event's timeEpoch (the
	// handler counts a wait from it); time.Now when nil. Tests that swap
	// the service's clock swap it too.
	Now func() time.Time
	// Timeouts overrides the timeout of the routes it names (by
	// api.Route.Name), e.g. for tests of a deadline that ends a wait; the
	// others get their route's Timeout, as Lambda gives a function.
	Timeouts map[string]time.Duration
	// limits models the stack's capacity bounds; nil (CapacityOff) admits
	// every request.
	limits *limits
	// counts are the Counts; refusals logs what the model refuses.
	counts   *counter
	refusals *refusalLog
}

// NewRunner returns a Runner over h. log receives runner-level failures,
// and a line a second counting the requests the capacity model refused.
func NewRunner(h *api.Handler, log *slog.Logger) *Runner {
	return &Runner{handler: h, log: log, counts: newCounter(), refusals: &refusalLog{log: log, every: time.Second}}
}

// Counts returns what rn has counted since it started: requests by route,
// try-acquires that carried wait_seconds, and refusals.
func (rn *Runner) Counts() Counts { return rn.counts.snapshot() }

// SetCapacity makes rn model c (see Capacity); call it before serving. It
// returns an error, and changes nothing, when c is not valid.
func (rn *Runner) SetCapacity(c Capacity) error {
	m, err := c.resolve()
	if err != nil {
		return err
	}
	rn.limits = newLimits(m, time.Now)
	return nil
}

// ServeHTTP routes r like API Gateway: unmatched method or path is
// 404 {"message":"Not Found"}.
func (rn *Runner) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	route, params, ok := match(r.Method, r.URL.EscapedPath())
	if !ok {
		writeMessage(w, http.StatusNotFound, "Not Found")
		return
	}
	if params == nil {
		writeMessage(w, http.StatusBadRequest, "Bad Request")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxPayloadBytes+1))
	if err != nil {
		writeMessage(w, http.StatusBadRequest, "Bad Request")
		return
	}
	if len(body) > maxPayloadBytes {
		writeMessage(w, http.StatusRequestEntityTooLarge, "Request Entity Too Large")
		return
	}
	// The route's throttle, then its function's concurrency: a request
	// over either never reaches the handler (nor the store).
	done, status, ok := rn.limits.admit(route)
	rn.counts.request(route, body, status)
	if !ok {
		rn.refusals.add(route.Key(), status)
		writeMessage(w, status, throttledMessage[status])
		return
	}
	ev := rn.event(r, route, params, body)
	// API Gateway does not cancel a Lambda when its client goes away, so
	// neither does the runner: the handler runs to its own deadline (an
	// invocation's: the function's timeout), and a client that disconnects
	// cannot abort a store call half-way.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), rn.timeout(route))
	defer cancel()
	// The execution ends when the handler returns (or panics), not when
	// the client has read the answer.
	resp, err := func() (events.APIGatewayV2HTTPResponse, error) {
		defer done()
		return route.Handle(rn.handler, ctx, ev)
	}()
	if err != nil {
		rn.log.Error("handler returned an error", "route", route.Key(), "error", err)
		writeMessage(w, http.StatusInternalServerError, "Internal Server Error")
		return
	}
	writeResponse(w, resp)
}

// timeout is the deadline a call of rt gets: the function's timeout (or
// the override in Timeouts), never more than API Gateway waits for it.
func (rn *Runner) timeout(rt api.Route) time.Duration {
	d := rt.Timeout
	if o, ok := rn.Timeouts[rt.Name]; ok {
		d = o
	}
	if d <= 0 || d > IntegrationTimeout {
		d = IntegrationTimeout
	}
	return d
}

// match finds the route for method and the escaped path, and decodes its
// path parameters. params is nil when a parameter is not valid
// percent-encoding.
func match(method, escapedPath string) (api.Route, map[string]string, bool) {
	segs := strings.Split(escapedPath, "/")
	for _, rt := range api.Routes {
		if rt.Method != method {
			continue
		}
		tmpl := strings.Split(rt.Path, "/")
		if len(tmpl) != len(segs) {
			continue
		}
		params := map[string]string{}
		ok := true
		for i, t := range tmpl {
			if name, isParam := strings.CutPrefix(t, "{"); isParam {
				if segs[i] == "" {
					ok = false
					break
				}
				v, err := url.PathUnescape(segs[i])
				if err != nil {
					return rt, nil, true
				}
				params[strings.TrimSuffix(name, "}")] = v
			} else if t != segs[i] {
				ok = false
				break
			}
		}
		if ok {
			return rt, params, true
		}
	}
	return api.Route{}, nil, false
}

func (rn *Runner) event(r *http.Request, rt api.Route, params map[string]string, body []byte) events.APIGatewayV2HTTPRequest {
	now := time.Now()
	if rn.Now != nil {
		now = rn.Now()
	}
	headers := map[string]string{}
	for k, v := range r.Header {
		if strings.EqualFold(k, "Cookie") {
			continue
		}
		headers[strings.ToLower(k)] = strings.Join(v, ",")
	}
	headers["host"] = r.Host
	var cookies []string
	for _, c := range r.Header.Values("Cookie") {
		for _, part := range strings.Split(c, ";") {
			if part = strings.TrimSpace(part); part != "" {
				cookies = append(cookies, part)
			}
		}
	}
	var query map[string]string
	if q := r.URL.Query(); len(q) > 0 {
		query = map[string]string{}
		for k, v := range q {
			query[k] = strings.Join(v, ",")
		}
	}
	sourceIP, _, _ := net.SplitHostPort(r.RemoteAddr)
	ev := events.APIGatewayV2HTTPRequest{
		Version:               "2.0",
		RouteKey:              rt.Key(),
		RawPath:               r.URL.EscapedPath(),
		RawQueryString:        r.URL.RawQuery,
		Cookies:               cookies,
		Headers:               headers,
		QueryStringParameters: query,
		PathParameters:        params,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RouteKey:     rt.Key(),
			AccountID:    "000000000000",
			Stage:        "$default",
			RequestID:    requestID(),
			APIID:        "local",
			DomainName:   r.Host,
			DomainPrefix: strings.Split(r.Host, ".")[0],
			Time:         now.UTC().Format("02/Jan/2006:15:04:05 -0700"),
			TimeEpoch:    now.UnixMilli(),
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{
				Method:    r.Method,
				Path:      r.URL.EscapedPath(),
				Protocol:  r.Proto,
				SourceIP:  sourceIP,
				UserAgent: r.UserAgent(),
			},
		},
	}
	if rn.Identity != nil {
		if iam := rn.Identity(r); iam != nil {
			ev.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{IAM: iam}
		}
	}
	if len(body) > 0 {
		if isText(r.Header.Get("Content-Type")) {
			ev.Body = string(body)
		} else {
			ev.Body = base64.StdEncoding.EncodeToString(body)
			ev.IsBase64Encoded = true
		}
	}
	return ev
}

// isText reports whether API Gateway would pass a body of this content type
// as text rather than base64.
func isText(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	switch {
	case strings.HasPrefix(mt, "text/"), strings.HasSuffix(mt, "+json"), strings.HasSuffix(mt, "+xml"):
		return true
	}
	switch mt {
	case "application/json", "application/xml", "application/javascript", "application/x-www-form-urlencoded":
		return true
	}
	return false
}

func writeResponse(w http.ResponseWriter, resp events.APIGatewayV2HTTPResponse) {
	h := w.Header()
	for k, v := range resp.Headers {
		h.Set(k, v)
	}
	for k, vs := range resp.MultiValueHeaders {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	for _, c := range resp.Cookies {
		h.Add("Set-Cookie", c)
	}
	body := []byte(resp.Body)
	if resp.IsBase64Encoded {
		if dec, err := base64.StdEncoding.DecodeString(resp.Body); err == nil {
			body = dec
		}
	}
	status := resp.StatusCode
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// throttledMessage is API Gateway's answer to a request refused by a
// route throttle (429) or by Lambda at its concurrency limit (500).
var throttledMessage = map[int]string{
	http.StatusTooManyRequests:     "Too Many Requests",
	http.StatusInternalServerError: "Internal Server Error",
}

func writeMessage(w http.ResponseWriter, status int, msg string) {
	b, _ := json.Marshal(map[string]string{"message": msg})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func requestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
