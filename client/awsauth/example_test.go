package awsauth_test

import (
	"context"
	"log"

	"github.com/ft288/locks/client"
	"github.com/ft288/locks/client/awsauth"
)

func ExampleSigV4FromDefaultChain() {
	ctx := context.Background()
	// Credentials and region as the AWS CLI finds them (AWS_PROFILE,
	// AWS_REGION, SSO, the instance role, ...); "" keeps the chain's region.
	sign, err := awsauth.SigV4FromDefaultChain(ctx, "")
	if err != nil {
		log.Fatal(err)
	}
	c, err := client.New("https://abc123.execute-api.eu-west-1.amazonaws.com", sign)
	if err != nil {
		log.Fatal(err)
	}
	_ = c // c.Acquire(ctx, ...) as without signing
}

func ExampleFromEnv() {
	ctx := context.Background()
	// LOCKS_ENDPOINT, credentials as the AWS CLI finds them and AWS_REGION;
	// LOCKS_SIGV4=0 turns signing off (for `make run`).
	c, err := awsauth.FromEnv(ctx)
	if err != nil {
		log.Fatal(err)
	}
	_ = c // c.Acquire(ctx, ...) as without signing
}
