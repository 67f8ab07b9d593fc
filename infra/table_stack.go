package main

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// GlobalTableStackProps configures NewGlobalTableStack. StackProps.Env must
// name the Region of the first replica.
type GlobalTableStackProps struct {
	awscdk.StackProps
	// TableName is the table's name in every Region. The lock service
	// stacks of the other Regions find their replica by it, so it is fixed
	// rather than generated (derived from the app's stack name).
	TableName string
	// Replicas are the Regions of the other replicas: one with a Witness,
	// two without.
	Replicas []string
	// Witness is the witness Region, or empty for three replicas.
	Witness string
	// RemovalPolicyDestroy deletes the table with the stack (dev stacks
	// only); by default it is retained with deletion protection on.
	RemovalPolicyDestroy bool
}

// NewGlobalTableStack creates the lock table of a multi-Region deployment: a
// DynamoDB global table with multi-Region strong consistency (MRSC), with a
// replica in the stack's Region and in each of props.Replicas, and the
// witness, if any. On an MRSC table a strongly consistent read in any
// replica returns the latest write, and a conditional write is evaluated
// against the latest version, wherever it was written: the lock rules hold
// across Regions as they do in one.
//
// The table has no TTL: DynamoDB does not support TTL on MRSC tables, so
// tombstones (released or expired locks, which keep the fencing counter)
// stay until deleted. The lock rules never depend on TTL (liveness is
// expires_at in every condition).
func NewGlobalTableStack(scope constructs.Construct, id string, props *GlobalTableStackProps) awscdk.Stack {
	stack := awscdk.NewStack(scope, &id, &props.StackProps)

	removal := awscdk.RemovalPolicy_RETAIN
	if props.RemovalPolicyDestroy {
		removal = awscdk.RemovalPolicy_DESTROY
	}
	pitr := &awsdynamodb.PointInTimeRecoverySpecification{PointInTimeRecoveryEnabled: jsii.Bool(true)}
	// Deletion protection and point-in-time recovery are per replica
	// (never synchronized), so each replica sets them too.
	var replicas []*awsdynamodb.ReplicaTableProps
	for _, r := range props.Replicas {
		replicas = append(replicas, &awsdynamodb.ReplicaTableProps{
			Region:                           jsii.String(r),
			DeletionProtection:               jsii.Bool(!props.RemovalPolicyDestroy),
			PointInTimeRecoverySpecification: pitr,
		})
	}
	var witness *string
	if props.Witness != "" {
		witness = jsii.String(props.Witness)
	}
	table := awsdynamodb.NewTableV2(stack, jsii.String("Locks"), &awsdynamodb.TablePropsV2{
		TableName: jsii.String(props.TableName),
		PartitionKey: &awsdynamodb.Attribute{
			Name: jsii.String("resource"),
			Type: awsdynamodb.AttributeType_STRING,
		},
		Billing:                          awsdynamodb.Billing_OnDemand(nil),
		MultiRegionConsistency:           awsdynamodb.MultiRegionConsistency_STRONG,
		Replicas:                         &replicas,
		WitnessRegion:                    witness,
		PointInTimeRecoverySpecification: pitr,
		DeletionProtection:               jsii.Bool(!props.RemovalPolicyDestroy),
		RemovalPolicy:                    removal,
	})

	awscdk.NewCfnOutput(stack, jsii.String("TableName"), &awscdk.CfnOutputProps{
		Description: jsii.String("DynamoDB global table (MRSC) that holds the locks, the same name in every Region"),
		Value:       table.TableName(),
	})
	return stack
}
