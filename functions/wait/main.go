// Command wait is the Lambda function behind the "wait" rows of api.Routes: the
// waiting acquires of locks and semaphores. It builds the handler once per cold
// start and serves events until the runtime stops it.
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/ft288/locks/api"
)

func main() {
	h, err := api.NewFromEnv(context.Background())
	if err != nil {
		slog.Error("wait: configuration", "error", err)
		os.Exit(1)
	}
	lambda.Start(api.NewInvoker(h.AcquireWait))
}
