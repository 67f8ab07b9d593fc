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

// TableAPI is the part of the DynamoDB client EnsureTable and
// ReturnsOldItem use.
type TableAPI interface {
	DescribeTable(ctx context.Context, params *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	CreateTable(ctx context.Context, params *dynamodb.CreateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	UpdateTimeToLive(ctx context.Context, params *dynamodb.UpdateTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
	UpdateItem(ctx context.Context, params *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(ctx context.Context, params *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
}

// probeKey is the item ReturnsOldItem writes and deletes again. Its name
// has a control character, which no lock name may have, so it can never be
// a lock.
const probeKey = "\x00locald-probe"

// ReturnsOldItem asks the store whether it returns the old item with a
// failed condition (ReturnValuesOnConditionCheckFailure): it writes a probe
// item, fails a condition on it and looks at the answer, then deletes it.
// DynamoDB does; dynalite does not. The answer is what
// locklogic.Config.OldItemOnFailure must be for this store, so it can never
// disagree with the store actually in use.
func ReturnsOldItem(ctx context.Context, db TableAPI, table string) (bool, error) {
	key := map[string]types.AttributeValue{locklogic.AttrResource: &types.AttributeValueMemberS{Value: probeKey}}
	defer db.DeleteItem(context.WithoutCancel(ctx), &dynamodb.DeleteItemInput{TableName: aws.String(table), Key: key})
	_, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(table),
		Key:                       key,
		UpdateExpression:          aws.String("SET #p = :p"),
		ExpressionAttributeNames:  map[string]string{"#p": "probe"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":p": &types.AttributeValueMemberBOOL{Value: true}},
	})
	if err != nil {
		return false, fmt.Errorf("probe %q: %w", table, err)
	}
	_, err = db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           aws.String(table),
		Key:                                 key,
		UpdateExpression:                    aws.String("SET #p = :p"),
		ConditionExpression:                 aws.String("attribute_not_exists(#p)"),
		ExpressionAttributeNames:            map[string]string{"#p": "probe"},
		ExpressionAttributeValues:           map[string]types.AttributeValue{":p": &types.AttributeValueMemberBOOL{Value: false}},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		return false, fmt.Errorf("probe %q: want a failed condition, got %v", table, err)
	}
	return ccf.Item != nil, nil
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
