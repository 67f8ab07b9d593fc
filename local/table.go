package local

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/ft288/locks/locklogic"
)

// TableAPI is the part of the DynamoDB client EnsureTable uses.
type TableAPI interface {
	DescribeTable(ctx context.Context, params *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	CreateTable(ctx context.Context, params *dynamodb.CreateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	UpdateTimeToLive(ctx context.Context, params *dynamodb.UpdateTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
}

var _ TableAPI = (*dynamodb.Client)(nil)

// EnsureTable creates the lock table (on-demand, partition key "resource")
// unless it exists, waits until it is active, and turns on TTL garbage
// collection where the server supports it (dynalite does not; expiry never
// depends on it). created reports whether the table was made now.
func EnsureTable(ctx context.Context, db TableAPI, table string) (created bool, err error) {
	_, err = db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	var notFound *types.ResourceNotFoundException
	switch {
	case err == nil:
		return false, nil
	case !errors.As(err, &notFound):
		return false, fmt.Errorf("describe table %q: %w", table, err)
	}
	_, err = db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(locklogic.AttrResource), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(locklogic.AttrResource), KeyType: types.KeyTypeHash}},
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return false, fmt.Errorf("create table %q: %w", table, err)
	}
	for {
		out, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
		if err == nil && out.Table.TableStatus == types.TableStatusActive {
			break
		}
		select {
		case <-ctx.Done():
			return false, fmt.Errorf("table %q did not become active: %w", table, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	_, err = db.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName:               aws.String(table),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String(locklogic.AttrTTL), Enabled: aws.Bool(true)},
	})
	var apiErr smithy.APIError
	if err != nil && !(errors.As(err, &apiErr) && apiErr.ErrorCode() == "UnknownOperationException") {
		// dynalite answers UnknownOperationException (it has no TTL);
		// anything else is a real failure to report.
		return true, fmt.Errorf("enable TTL on %q: %w", table, err)
	}
	return true, nil
}
