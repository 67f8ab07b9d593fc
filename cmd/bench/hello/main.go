// Command hello is the yardstick of the bench's cold-start figure: the
// smallest aws-lambda-go function for an API Gateway HTTP API, which
// answers every event 200 "hello" and does nothing else. The bench builds
// it exactly as `make build` builds the lock functions.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
)

func main() {
	lambda.Start(func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		return events.APIGatewayV2HTTPResponse{StatusCode: 200, Body: "hello"}, nil
	})
}
