package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ft288/locks/locklogic"
)

// Config is the service configuration, read from the environment once per
// process.
type Config struct {
	// Table is TABLE_NAME, the DynamoDB table holding the locks (required).
	Table string
	// MaxTTLSeconds is MAX_TTL_SECONDS, the longest lease granted
	// (default 86400).
	MaxTTLSeconds int64
	// Retention is TOMBSTONE_RETENTION_SECONDS, how long an idle record is
	// kept before DynamoDB's TTL may delete it (default 604800, 7 days).
	Retention time.Duration
	// Endpoint is DYNAMODB_ENDPOINT, a DynamoDB-compatible endpoint to use
	// instead of AWS's (dynalite, DynamoDB Local). Empty in AWS.
	Endpoint string
	// MaxWaitSeconds is MAX_WAIT_SECONDS, the longest wait_seconds an
	// acquire may ask for (default and upper bound 20; 0 turns waiting off).
	MaxWaitSeconds int64
	// MaxLockDelaySeconds is MAX_LOCK_DELAY_SECONDS, the longest
	// lock_delay_seconds an acquire may ask for (default 300; 0 turns
	// lock-delay off; at most locklogic.MaxLockDelayLimit).
	MaxLockDelaySeconds int64
	// MetricsNamespace is METRICS_NAMESPACE, the CloudWatch namespace of
	// the request metrics in the log lines (default
	// DefaultMetricsNamespace).
	MetricsNamespace string
	// LogLevel is LOG_LEVEL: debug, info (default), warn or error.
	LogLevel slog.Level
	// OldItemOnFailure is DYNAMODB_RETURNS_OLD_ITEM: the store returns the
	// old item with a failed condition, as DynamoDB does, so explaining a
	// failed renew or release never needs a read (and the functions need no
	// GetItem permission for it; see locklogic.Config.OldItemOnFailure).
	// Default: true unless an endpoint override is set (DYNAMODB_ENDPOINT,
	// AWS_ENDPOINT_URL_DYNAMODB or AWS_ENDPOINT_URL: dynalite does not).
	// The local runner does not guess: it asks the store (see
	// local.ReturnsOldItem) and refuses to start if an explicit setting
	// disagrees.
	OldItemOnFailure bool
	// OldItemSet says DYNAMODB_RETURNS_OLD_ITEM was set explicitly.
	OldItemSet bool
	// Admins is ADMIN_PRINCIPALS, the ARNs allowed to call the admin
	// routes (see ParseAdminPrincipals); none by default. NewFromEnv
	// applies it; the local runner, which has no IAM, does not.
	Admins []string
}

// Upper bounds of the configuration: beyond them a lease's expiry or the
// garbage-collection time would overflow, and no lock needs them.
const (
	// MaxTTLLimit bounds MAX_TTL_SECONDS: 365 days.
	MaxTTLLimit = 365 * 24 * 3600
	// MaxRetentionLimit bounds TOMBSTONE_RETENTION_SECONDS: 10 years.
	MaxRetentionLimit = 10 * 365 * 24 * 3600
)

// ServiceConfig returns the locklogic configuration for c.
func (c Config) ServiceConfig() locklogic.Config {
	maxWait := c.MaxWaitSeconds
	if maxWait == 0 {
		maxWait = -1 // off; locklogic reads 0 as its default
	}
	maxDelay := c.MaxLockDelaySeconds
	if maxDelay == 0 {
		maxDelay = -1 // off, likewise
	}
	return locklogic.Config{Table: c.Table, MaxTTLSeconds: c.MaxTTLSeconds, Retention: c.Retention,
		OldItemOnFailure: c.OldItemOnFailure, MaxWaitSeconds: maxWait, MaxLockDelaySeconds: maxDelay,
		FairWaiting: true}
}

// ConfigFromEnv reads Config from getenv (os.Getenv in production) and
// reports every missing or malformed variable.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	cfg := Config{
		Table:          getenv("TABLE_NAME"),
		MaxTTLSeconds:  locklogic.DefaultMaxTTLSeconds,
		Retention:      locklogic.DefaultRetention,
		MaxWaitSeconds: locklogic.DefaultMaxWaitSeconds,
		Endpoint:       getenv("DYNAMODB_ENDPOINT"),

		MaxLockDelaySeconds: locklogic.DefaultMaxLockDelaySeconds,
		MetricsNamespace:    DefaultMetricsNamespace,
	}
	var errs []error
	if cfg.Table == "" {
		errs = append(errs, errors.New("TABLE_NAME is required"))
	}
	if v := getenv("MAX_TTL_SECONDS"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 || n > MaxTTLLimit {
			errs = append(errs, fmt.Errorf("MAX_TTL_SECONDS=%q: want an integer from 1 to %d (365 days)", v, MaxTTLLimit))
		}
		cfg.MaxTTLSeconds = n
	}
	if v := getenv("TOMBSTONE_RETENTION_SECONDS"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 || n > MaxRetentionLimit {
			errs = append(errs, fmt.Errorf("TOMBSTONE_RETENTION_SECONDS=%q: want an integer from 1 to %d (10 years)", v, MaxRetentionLimit))
		}
		cfg.Retention = time.Duration(n) * time.Second
	}
	if v := getenv("MAX_WAIT_SECONDS"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || n > locklogic.MaxWaitLimit {
			errs = append(errs, fmt.Errorf("MAX_WAIT_SECONDS=%q: want an integer from 0 (no waiting) to %d", v, locklogic.MaxWaitLimit))
		}
		cfg.MaxWaitSeconds = n
	}
	if v := getenv("MAX_LOCK_DELAY_SECONDS"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || n > locklogic.MaxLockDelayLimit {
			errs = append(errs, fmt.Errorf("MAX_LOCK_DELAY_SECONDS=%q: want an integer from 0 (no lock-delay) to %d (1 day)", v, locklogic.MaxLockDelayLimit))
		}
		cfg.MaxLockDelaySeconds = n
	}
	if v := getenv("METRICS_NAMESPACE"); v != "" {
		if !validNamespace(v) {
			errs = append(errs, fmt.Errorf("METRICS_NAMESPACE=%q: want 1 to 255 letters, digits or . - _ / # : and spaces, not starting with AWS/", v))
		}
		cfg.MetricsNamespace = v
	}
	cfg.OldItemOnFailure = cfg.Endpoint == "" && getenv("AWS_ENDPOINT_URL_DYNAMODB") == "" && getenv("AWS_ENDPOINT_URL") == ""
	if v := getenv("DYNAMODB_RETURNS_OLD_ITEM"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("DYNAMODB_RETURNS_OLD_ITEM=%q: want true or false", v))
		}
		cfg.OldItemOnFailure, cfg.OldItemSet = b, true
	}
	if v := getenv("LOG_LEVEL"); v != "" {
		if err := cfg.LogLevel.UnmarshalText([]byte(v)); err != nil {
			errs = append(errs, fmt.Errorf("LOG_LEVEL=%q: want debug, info, warn or error", v))
		}
	}
	admins, err := ParseAdminPrincipals(getenv(AdminPrincipalsEnv))
	if err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", AdminPrincipalsEnv, err))
	}
	cfg.Admins = admins
	return cfg, errors.Join(errs...)
}

// NewDynamoDB builds the DynamoDB client from the default AWS configuration
// chain. With endpoint set it talks to that server instead; when that server
// is on this machine (dynalite, DynamoDB Local) and no credentials or region
// are in the environment, it uses placeholder credentials and us-east-1, so
// a local run needs no AWS account. A remote endpoint keeps the default
// chain (profiles, SSO, roles).
func NewDynamoDB(ctx context.Context, endpoint string, optFns ...func(*dynamodb.Options)) (*dynamodb.Client, error) {
	var loadOpts []func(*config.LoadOptions) error
	if isLoopback(endpoint) {
		if os.Getenv("AWS_REGION") == "" && os.Getenv("AWS_DEFAULT_REGION") == "" {
			loadOpts = append(loadOpts, config.WithRegion("us-east-1"))
		}
		if os.Getenv("AWS_ACCESS_KEY_ID") == "" {
			loadOpts = append(loadOpts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("local", "local", "")))
		}
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("load AWS config: %w", err)
	}
	opts := []func(*dynamodb.Options){func(o *dynamodb.Options) { o.Retryer = newRetryer() }}
	if endpoint != "" {
		opts = append(opts, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(endpoint) })
	}
	return dynamodb.NewFromConfig(awsCfg, append(opts, optFns...)...), nil
}

// StoreAttempts is how many times the SDK sends one DynamoDB request at
// most (the first attempt and its retries of throttling, 5xx and connection
// failures), all within the handler's StoreBudget. It is the DynamoDB
// client's own default, pinned so an SDK upgrade cannot change it unseen;
// TestStoreFaultsAre503 counts the attempts.
const StoreAttempts = 4

// newRetryer is the SDK's standard retryer with DynamoDB's own settings
// (StoreAttempts attempts, 25 ms base backoff), pinned, plus one more
// retryable failure: an answer cut off mid-body. The SDK does not retry that
// by itself, yet every lock write is safe to repeat: a repeated acquire or
// renew carries the same :now and passes its own stamp, and a repeated
// release finds its own release_id.
func newRetryer() aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxAttempts = StoreAttempts
		o.BaseDelay = 25 * time.Millisecond
		o.Retryables = append(o.Retryables, retry.IsErrorRetryableFunc(func(err error) aws.Ternary {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return aws.TrueTernary
			}
			return aws.UnknownTernary
		}))
	})
}

// NewLogger returns the JSON logger every entry point uses, on stdout.
func NewLogger(level slog.Level) *slog.Logger {
	return NewLoggerTo(os.Stdout, level)
}

// NewFromEnv builds the Handler of a Lambda function: configuration from the
// environment, one DynamoDB client and one Service for the life of the
// process; the admin routes answer only the principals of ADMIN_PRINCIPALS
// (none when it is empty). Call it once in main, before lambda.Start.
func NewFromEnv(ctx context.Context) (*Handler, error) {
	cfg, err := ConfigFromEnv(os.Getenv)
	if err != nil {
		return nil, err
	}
	db, err := NewDynamoDB(ctx, cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	h := NewHandler(locklogic.New(db, cfg.ServiceConfig()), NewLogger(cfg.LogLevel), nil)
	h.SetMetricsNamespace(cfg.MetricsNamespace)
	h.SetAdmins(cfg.Admins) // none listed: every admin call is refused
	return h, nil
}

// validNamespace reports whether ns is a CloudWatch namespace a function
// may publish to: 1–255 ASCII letters, digits and . - _ / # : or spaces,
// not one of AWS's own (AWS/...).
func validNamespace(ns string) bool {
	if len(ns) > 255 || strings.TrimSpace(ns) == "" || strings.HasPrefix(ns, "AWS/") {
		return false
	}
	for _, c := range ns {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', strings.ContainsRune(".-_/#: ", c):
		default:
			return false
		}
	}
	return true
}

// isLoopback reports whether endpoint is a URL of this machine.
func isLoopback(endpoint string) bool {
	u, err := url.Parse(endpoint)
	if err != nil || u.Hostname() == "" {
		return false
	}
	if u.Hostname() == "localhost" {
		return true
	}
	ip := net.ParseIP(u.Hostname())
	return ip != nil && ip.IsLoopback()
}
