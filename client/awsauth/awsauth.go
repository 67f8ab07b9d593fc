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
	"os"
	"strings"

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

// FromEnv returns a Client of the service named by LOCKS_ENDPOINT
// (client.DefaultEndpoint when unset) that signs every request with
// credentials from the AWS SDK's default chain, in AWS_REGION or else the
// profile's region (see SigV4FromDefaultChain), with opts. It is
// client.FromEnv with signing: LOCKS_SIGV4 need not be set, and set to 0,
// false or no (any case) it turns signing off, so that the same program
// runs against `make run` without credentials.
func FromEnv(ctx context.Context, opts ...client.Option) (*client.Client, error) {
	endpoint := client.EndpointFromEnv()
	switch strings.ToLower(strings.TrimSpace(os.Getenv(client.EnvSigV4))) {
	case "0", "false", "no":
		return client.New(endpoint, opts...)
	}
	sign, err := SigV4FromDefaultChain(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("awsauth.FromEnv: %w", err)
	}
	return client.New(endpoint, append(opts, sign)...)
}
