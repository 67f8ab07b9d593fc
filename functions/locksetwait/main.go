// Command locksetwait is the Lambda function behind the "locksetwait" row
// of api.Routes: a lock set's waiting acquire, which waits holding nothing
// and tries the whole set again. It builds the handler once per cold start
// and serves events until the runtime stops it.
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
		slog.Error("locksetwait: configuration", "error", err)
		os.Exit(1)
	}
	lambda.Start(api.NewInvoker(h.LockSetWait))
}
