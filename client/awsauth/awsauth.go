// Package awsauth signs the lock service's requests with credentials from
// the AWS SDK's default chain. It is a module of its own, so that a program
// that does not sign, or brings its own credentials provider to
// client.WithSigV4, does not depend on aws-sdk-go-v2/config and the
// credential providers it pulls in (SSO, STS, the instance metadata
// service).
package awsauth

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/config"

	"github.com/ft288/locks/client"
)

// SigV4FromDefaultChain loads credentials from the AWS SDK's default chain
// (environment, shared config and credentials files, SSO, web identity,
// container and instance roles) and returns the client.WithSigV4 option for
// them. region overrides the region the chain finds (AWS_REGION, the
// profile); one of them must give a region.
func SigV4FromDefaultChain(ctx context.Context, region string) (client.Option, error) {
	var opts []func(*config.LoadOptions) error
	if region != "" {
		opts = append(opts, config.WithRegion(region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("load AWS config: %w", err)
	}
	if cfg.Region == "" {
		return nil, errors.New("load AWS config: no region: set AWS_REGION or pass a region")
	}
	if cfg.Credentials == nil {
		return nil, errors.New("load AWS config: no credentials provider")
	}
	// Fail now if there are no credentials at all; later retrieval failures
	// (a refresh hiccup of SSO, STS or the instance role) are retried.
	if _, err := cfg.Credentials.Retrieve(ctx); err != nil {
		return nil, fmt.Errorf("load AWS credentials: %w", err)
	}
	return client.WithSigV4(cfg.Region, cfg.Credentials), nil
}
