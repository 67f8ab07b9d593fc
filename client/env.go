package client

import (
	"errors"
	"os"
	"strings"
)

// Environment variables FromEnv reads; the TypeScript and Python clients
// and lockctl read the same.
const (
	// EnvEndpoint names the variable with the service's base URL
	// (DefaultEndpoint when unset or empty).
	EnvEndpoint = "LOCKS_ENDPOINT"
	// EnvSigV4 names the variable that asks for SigV4 signing when it is
	// 1, true or yes (any case).
	EnvSigV4 = "LOCKS_SIGV4"
)

// FromEnv returns a Client of the service named by LOCKS_ENDPOINT
// (DefaultEndpoint when unset), with opts. It does not sign: with
// LOCKS_SIGV4 set to 1, true or yes it returns an error that points to
// awsauth.FromEnv (module github.com/ft288/locks/client/awsauth), which
// reads the same variables and signs with the AWS default credential
// chain, so that this module needs no credential providers.
func FromEnv(opts ...Option) (*Client, error) {
	if truthy(os.Getenv(EnvSigV4)) {
		return nil, errors.New("client: " + EnvSigV4 + " asks for SigV4 signing, which client.FromEnv does not do: " +
			"use awsauth.FromEnv(ctx, opts...) of github.com/ft288/locks/client/awsauth, " +
			"or client.New with client.WithSigV4(region, credentials)")
	}
	return New(EndpointFromEnv(), opts...)
}

// EndpointFromEnv returns LOCKS_ENDPOINT, or DefaultEndpoint when it is
// unset or empty.
func EndpointFromEnv() string {
	if u := os.Getenv(EnvEndpoint); u != "" {
		return u
	}
	return DefaultEndpoint
}

// truthy reports whether an environment variable's value v switches a
// setting on: 1, true or yes, in any case, as the TypeScript and Python
// clients read LOCKS_SIGV4.
func truthy(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "true", "yes":
		return true
	}
	return false
}
