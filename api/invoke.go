package api

import (
	"context"
	"slices"
	"strconv"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda/handlertrace"
)

// Invoker is a HandlerFunc as the Lambda runtime calls it, payload bytes in
// and out: it implements lambda.Handler, so that lambda.Start uses it as it
// is, without aws-lambda-go's reflection and encoding/json, which cost the
// function half as much CPU again as its DynamoDB call (make bench). The
// handler sees the event encoding/json would give it, in the members it
// reads (decodeEvent), and the runtime gets the bytes aws-lambda-go would
// write (appendResponse; TestInvoker, FuzzInvoke).
type Invoker struct {
	f HandlerFunc
}

// NewInvoker returns f as the Lambda runtime calls it: lambda.Start(api.NewInvoker(h.Acquire)).
func NewInvoker(f HandlerFunc) *Invoker { return &Invoker{f: f} }

// Invoke decodes payload, an API Gateway HTTP API (payload 2.0) event,
// calls the handler, and returns its response as JSON. Like aws-lambda-go,
// it returns an event that does not decode, or the handler's error, as the
// invocation's error, and calls the handlertrace callbacks of ctx.
func (in *Invoker) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	var ev events.APIGatewayV2HTTPRequest
	if err := decodeEvent(payload, &ev); err != nil {
		return nil, err
	}
	trace := handlertrace.FromContext(ctx)
	if trace.RequestEvent != nil {
		trace.RequestEvent(ctx, ev)
	}
	resp, err := in.f(ctx, ev)
	if err != nil {
		return nil, err
	}
	if trace.ResponseEvent != nil {
		trace.ResponseEvent(ctx, resp)
	}
	return appendResponse(make([]byte, 0, 192+len(resp.Body)+len(resp.Body)/8), &resp), nil
}

// appendResponse appends r as aws-lambda-go writes a response: an
// encoding/json Encoder without HTML escaping (the members in the struct's
// order, map keys sorted, nil maps and slices as null), without the
// Encoder's final newline.
func appendResponse(b []byte, r *events.APIGatewayV2HTTPResponse) []byte {
	b = append(b, `{"statusCode":`...)
	b = strconv.AppendInt(b, int64(r.StatusCode), 10)
	b = append(b, `,"headers":`...)
	if r.Headers == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '{')
		for i, k := range sortedKeys(r.Headers) {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k, &jsonSafe)
			b = append(b, ':')
			b = appendString(b, r.Headers[k], &jsonSafe)
		}
		b = append(b, '}')
	}
	b = append(b, `,"multiValueHeaders":`...)
	if r.MultiValueHeaders == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '{')
		for i, k := range sortedKeys(r.MultiValueHeaders) {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k, &jsonSafe)
			b = append(b, ':')
			b = appendStrings(b, r.MultiValueHeaders[k])
		}
		b = append(b, '}')
	}
	b = append(b, `,"body":`...)
	b = appendString(b, r.Body, &jsonSafe)
	if r.IsBase64Encoded {
		b = append(b, `,"isBase64Encoded":true`...)
	}
	b = append(b, `,"cookies":`...)
	b = appendStrings(b, r.Cookies)
	return append(b, '}')
}

// appendStrings appends ss as a JSON array, or null for nil.
func appendStrings(b []byte, ss []string) []byte {
	if ss == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, s, &jsonSafe)
	}
	return append(b, ']')
}

// sortedKeys returns m's keys in encoding/json's order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
