// Command admin is the Lambda function behind the "admin" rows of api.Routes
// (GET /admin/locks, DELETE /admin/locks/{resource}), dispatched on the
// route key by api.Handler.Admin.
// It builds the handler once per cold start and serves events until the
// runtime stops it.
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
		slog.Error("admin: configuration", "error", err)
		os.Exit(1)
	}
	lambda.Start(api.NewInvoker(h.Admin))
}
