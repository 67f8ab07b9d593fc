package api

import (
	"context"

	"github.com/aws/aws-lambda-go/events"
)

// HandlerFunc is the signature every Lambda handler in this service has: one
// API Gateway HTTP API (payload format 2.0) event in, one response out. It
// never returns a non-nil error; failures are problem responses.
type HandlerFunc func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)

// Route is one row of the route table: the Lambda function Name (also the
// folder functions/<Name> that holds its main), the HTTP Method and the API
// Gateway Path template, and the Handler method that serves it.
type Route struct {
	Name   string
	Method string
	Path   string
	// Handle is a method expression on *Handler, so the table can be read
	// (by the CDK app) without building a Handler.
	Handle func(h *Handler, ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)
}

// Key returns the API Gateway route key, e.g. "POST /locks/{resource}".
func (r Route) Key() string { return r.Method + " " + r.Path }

// Routes is the one route table. The local runner serves it and the CDK app
// in infra/ creates one function and one API Gateway route per row.
var Routes = []Route{
	{Name: "acquire", Method: "POST", Path: "/locks/{resource}", Handle: (*Handler).Acquire},
	{Name: "status", Method: "GET", Path: "/locks/{resource}", Handle: (*Handler).Status},
	{Name: "release", Method: "DELETE", Path: "/locks/{resource}", Handle: (*Handler).Release},
	{Name: "renew", Method: "POST", Path: "/locks/{resource}/renew", Handle: (*Handler).Renew},
}
