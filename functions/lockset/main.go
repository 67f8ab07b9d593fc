// Command lockset is the Lambda function behind the "lockset" rows of
// api.Routes: a lock set's try, renewal and release, each writing every
// name of the set. It builds the handler once per cold start and serves
// events until the runtime stops it.
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
		slog.Error("lockset: configuration", "error", err)
		os.Exit(1)
	}
	lambda.Start(api.NewInvoker(h.LockSet))
}
