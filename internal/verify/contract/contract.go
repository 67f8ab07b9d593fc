// Package contract holds the lock service's HTTP answers to its OpenAPI
// document, api/openapi.yaml (embedded as api.OpenAPI). A test harness wraps
// the server it talks to in Middleware, and every answer the document does
// not describe — an undocumented status, a missing or wrong header, a body
// that does not match its schema, a body where none is documented — is
// reported with the request's route, the status and the body. The local
// test servers (internal/testenv) are wrapped this way, so every integration
// suite that uses them (local/, client/, cmd/lockctl/) checks the contract
// on each answer it receives.
//
// Requests are not checked: tests send invalid requests on purpose. A
// request only selects the documented operation (method and path template,
// matched on the escaped path as API Gateway and the local runner match it),
// whose answers its answer must be one of. A request that matches no route
// must get API Gateway's own 404, the document's RouteNotFound response.
package contract

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/ft288/locks/api"
)

// RouteNotFound names the document's component response for a request that
// matches none of its operations (API Gateway's {"message":"Not Found"}).
const RouteNotFound = "RouteNotFound"

// Document is a loaded, validated OpenAPI document. It is safe for
// concurrent use.
type Document struct {
	spec       *openapi3.T
	operations []Operation
	// unmatched is an operation made up of the RouteNotFound response
	// only, the one answer a request outside the routes may get.
	unmatched *openapi3.Operation
}

// Operation is one documented method on one path template.
type Operation struct {
	// Method is the HTTP method, e.g. "POST".
	Method string
	// Path is the path template, e.g. "/locks/{resource}".
	Path string
	// ID is the operationId, e.g. "acquire".
	ID string

	op *openapi3.Operation
}

// Load returns the service's own document, api.OpenAPI.
func Load() (*Document, error) { return Parse(api.OpenAPI) }

// Parse loads an OpenAPI 3.1 document from data (YAML or JSON) and validates
// it, examples included: an example that does not match its schema is an
// error here, not a surprise for a generated client.
func Parse(data []byte) (*Document, error) {
	loader := openapi3.NewLoader()
	spec, err := loader.LoadFromData(data)
	if err != nil {
		return nil, fmt.Errorf("load OpenAPI document: %w", err)
	}
	if !spec.IsOpenAPI31OrLater() {
		return nil, fmt.Errorf("OpenAPI document: got version %q, want 3.1", spec.OpenAPI)
	}
	if err := spec.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("invalid OpenAPI document: %w", err)
	}
	d := &Document{spec: spec}
	for path, item := range spec.Paths.Map() {
		for method, op := range item.Operations() {
			d.operations = append(d.operations, Operation{Method: method, Path: path, ID: op.OperationID, op: op})
		}
	}
	slices.SortFunc(d.operations, func(a, b Operation) int {
		return strings.Compare(a.Path+" "+a.Method, b.Path+" "+b.Method)
	})
	nf := spec.Components.Responses[RouteNotFound]
	if nf == nil || nf.Value == nil {
		return nil, fmt.Errorf("OpenAPI document: components.responses.%s is missing", RouteNotFound)
	}
	d.unmatched = &openapi3.Operation{Responses: openapi3.NewResponses(openapi3.WithStatus(http.StatusNotFound, nf))}
	return d, nil
}

// Operations returns the documented operations, sorted by path and method.
func (d *Document) Operations() []Operation { return slices.Clone(d.operations) }

// Find returns the operation that serves method on escapedPath, matched
// segment by segment the way API Gateway matches it: a {parameter} takes one
// non-empty segment, so "/locks/a%2Fb" is one resource. ok is false when no
// route matches.
func (d *Document) Find(method, escapedPath string) (op Operation, ok bool) {
	segs := strings.Split(escapedPath, "/")
	for _, o := range d.operations {
		if o.Method != method {
			continue
		}
		tmpl := strings.Split(o.Path, "/")
		if len(tmpl) != len(segs) {
			continue
		}
		match := true
		for i, t := range tmpl {
			if strings.HasPrefix(t, "{") && strings.HasSuffix(t, "}") {
				match = segs[i] != ""
			} else {
				match = t == segs[i]
			}
			if !match {
				break
			}
		}
		if match {
			return o, true
		}
	}
	return Operation{}, false
}

// Mismatch is an answer the document does not describe.
type Mismatch struct {
	// Route is the documented operation the request selected, e.g.
	// "POST /locks/{resource}", or "no route" for a request outside them.
	Route string
	// Method and Path are the request's method and escaped path.
	Method, Path string
	// Status, Header and Body are the answer.
	Status int
	Header http.Header
	Body   []byte
	// Err says what does not match.
	Err error
}

func (m *Mismatch) Error() string {
	body := m.Body
	if len(body) > maxQuoted {
		body = body[:maxQuoted]
	}
	// openapi3's schema errors go on with the whole schema and value; the
	// reason and the body say enough.
	reason := m.Err.Error()
	if i := strings.Index(reason, "\nSchema:"); i >= 0 {
		reason = reason[:i]
	}
	return fmt.Sprintf("%s %s (%s): the answer %d is not one api/openapi.yaml describes: %s\nbody (%d bytes): %s",
		m.Method, m.Path, m.Route, m.Status, reason, len(m.Body), strconv.Quote(string(body)))
}

// maxQuoted bounds how much of a body a Mismatch quotes.
const maxQuoted = 2 << 10

func (m *Mismatch) Unwrap() error { return m.Err }

// Check returns nil if the document describes the answer (status, header,
// body) to a request with method on escapedPath, and a *Mismatch otherwise.
// Every header the documented response declares is checked (a required one
// must be present), and so is the body: its Content-Type must be one of the
// documented media types and the body must match that type's schema; a
// response documented without content must have an empty body.
func (d *Document) Check(method, escapedPath string, status int, header http.Header, body []byte) error {
	route := "no route"
	op, ok := d.Find(method, escapedPath)
	operation, opMethod, opPath := d.unmatched, http.MethodGet, escapedPath
	if ok {
		route = op.Method + " " + op.Path
		operation, opMethod, opPath = op.op, op.Method, op.Path
	}
	fail := func(err error) error {
		return &Mismatch{Route: route, Method: method, Path: escapedPath, Status: status, Header: header, Body: body, Err: err}
	}
	resp := operation.Responses.Status(status)
	if resp == nil || resp.Value == nil {
		var documented []string
		for code := range operation.Responses.Map() {
			documented = append(documented, code)
		}
		slices.Sort(documented)
		return fail(fmt.Errorf("status %d is not documented (documented: %s)", status, strings.Join(documented, ", ")))
	}
	if len(resp.Value.Content) == 0 && len(body) > 0 {
		return fail(errors.New("the response is documented without a body, but has one"))
	}
	// The request only tells openapi3filter which operation's answers to
	// hold the answer to; it is not validated. The unmatched case is
	// checked as a GET, since openapi3filter skips every HEAD.
	req := &http.Request{Method: opMethod, URL: &url.URL{Path: escapedPath}, Header: http.Header{}}
	input := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request: req,
			Route:   &routers.Route{Spec: d.spec, Path: opPath, Method: opMethod, Operation: operation},
		},
		Status:  status,
		Header:  header,
		Body:    io.NopCloser(bytes.NewReader(body)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), input); err != nil {
		return fail(err)
	}
	return nil
}

// checked counts the answers every Middleware in this process has checked.
var checked atomic.Int64

// Checked returns how many answers the middlewares of this process have
// checked so far, documented or not.
func Checked() int64 { return checked.Load() }

// Middleware returns next wrapped so that every answer it gives is checked
// with Check before any of it reaches the client, and report is called with
// the *Mismatch of each one the document does not describe (from the
// serving goroutine, before the client can see the answer, so a test that
// reports with tb.Errorf is still running). The answer is passed on
// unchanged either way.
func (d *Document) Middleware(next http.Handler, report func(*Mismatch)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		method, path := r.Method, r.URL.EscapedPath()
		rec := &recorder{header: http.Header{}}
		next.ServeHTTP(rec, r)
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		checked.Add(1)
		if rec.sent == nil {
			rec.sent = rec.header
		}
		if err := d.Check(method, path, rec.status, rec.sent, rec.body.Bytes()); err != nil {
			var m *Mismatch
			if errors.As(err, &m) {
				report(m)
			}
		}
		for k, v := range rec.sent {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.status)
		_, _ = w.Write(rec.body.Bytes())
	})
}

// recorder holds an answer until it has been checked.
type recorder struct {
	header http.Header
	sent   http.Header // header as of WriteHeader; later changes are lost, as in net/http
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status, r.sent = status, r.header.Clone()
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(b)
}
