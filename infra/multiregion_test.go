package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/ft288/locks/api"
)

// TestMultiRegion checks the multi-Region synth: a stack in the first
// Region with the global table (MRSC, the replicas and the witness, no
// TTL), and in each replica Region a lock service stack whose functions use
// that Region's replica by name, with no cross-Region reference.
func TestMultiRegion(t *testing.T) {
	const tableName = DefaultStackName + "-Locks"
	tests := []struct {
		variant    string
		regions    []string
		witness    string
		wantPolicy string
		wantProt   bool
	}{
		{variant: multi2, regions: []string{"us-east-1", "us-east-2"}, witness: "us-west-2", wantPolicy: "Retain", wantProt: true},
		{variant: multi3, regions: []string{"eu-west-1", "eu-west-2", "eu-west-3"}, wantPolicy: "Delete", wantProt: false},
	}
	for _, tt := range tests {
		t.Run(tt.variant, func(t *testing.T) {
			stacks := synthStacks(t, tt.variant)
			if len(stacks) != 1+len(tt.regions) {
				t.Fatalf("got %d stacks, want the table's and one per replica Region (%d)", len(stacks), 1+len(tt.regions))
			}

			tbl := stacks[0]
			t.Run("GlobalTable", func(t *testing.T) {
				if tbl.name != DefaultStackName+"-Table" || *tbl.stack.Region() != tt.regions[0] {
					t.Errorf("table stack: got %s in %s, want %s-Table in %s", tbl.name, *tbl.stack.Region(), DefaultStackName, tt.regions[0])
				}
				match(t, "one global table, no other table", func() {
					tbl.tmpl.ResourceCountIs(jsii.String("AWS::DynamoDB::GlobalTable"), jsii.Number(1))
					tbl.tmpl.ResourceCountIs(jsii.String("AWS::DynamoDB::Table"), jsii.Number(0))
				})
				match(t, "global table properties", func() {
					tbl.tmpl.HasResourceProperties(jsii.String("AWS::DynamoDB::GlobalTable"), map[string]any{
						"TableName":              tableName,
						"MultiRegionConsistency": "STRONG",
						"BillingMode":            "PAY_PER_REQUEST",
						"KeySchema":              []any{map[string]any{"AttributeName": "resource", "KeyType": "HASH"}},
						"AttributeDefinitions":   []any{map[string]any{"AttributeName": "resource", "AttributeType": "S"}},
						// DynamoDB does not support TTL on MRSC tables.
						"TimeToLiveSpecification": assertions.Match_Absent(),
					})
				})
				match(t, "removal policy", func() {
					tbl.tmpl.HasResource(jsii.String("AWS::DynamoDB::GlobalTable"), map[string]any{
						"DeletionPolicy": tt.wantPolicy, "UpdateReplacePolicy": tt.wantPolicy,
					})
				})
				p := tbl.props(t, tbl.only(t, "AWS::DynamoDB::GlobalTable"))
				var replicas []string
				for _, r := range strs(p["Replicas"]) {
					r := r.(map[string]any)
					region, _ := r["Region"].(string)
					replicas = append(replicas, region)
					if r["DeletionProtectionEnabled"] != tt.wantProt {
						t.Errorf("replica %s: got DeletionProtectionEnabled %v, want %v", region, r["DeletionProtectionEnabled"], tt.wantProt)
					}
					pitr, _ := r["PointInTimeRecoverySpecification"].(map[string]any)
					if pitr["PointInTimeRecoveryEnabled"] != true {
						t.Errorf("replica %s: got PointInTimeRecoverySpecification %v, want enabled", region, r["PointInTimeRecoverySpecification"])
					}
				}
				if !slices.Equal(sorted(replicas), sorted(tt.regions)) {
					t.Errorf("replicas: got %v, want %v", sorted(replicas), sorted(tt.regions))
				}
				var witnesses []string
				for _, w := range strs(p["GlobalTableWitnesses"]) {
					if w, ok := w.(map[string]any); ok {
						witnesses = append(witnesses, w["Region"].(string))
					}
				}
				var wantWitnesses []string
				if tt.witness != "" {
					wantWitnesses = []string{tt.witness}
				}
				if !slices.Equal(witnesses, wantWitnesses) {
					t.Errorf("witnesses: got %v, want %v", witnesses, wantWitnesses)
				}
				// Three Regions in all, as MRSC requires.
				if n := len(replicas) + len(witnesses); n != 3 {
					t.Errorf("got %d Regions (replicas and witness), want 3", n)
				}
				match(t, "TableName output", func() {
					tbl.tmpl.HasOutput(jsii.String("TableName"), map[string]any{
						"Value": map[string]any{"Ref": tbl.only(t, "AWS::DynamoDB::GlobalTable")},
					})
				})
			})

			for i, region := range tt.regions {
				s := stacks[1+i]
				t.Run(region, func(t *testing.T) {
					if s.name != DefaultStackName+"-"+region || *s.stack.Region() != region {
						t.Errorf("got stack %s in %s, want %s-%s in %s", s.name, *s.stack.Region(), DefaultStackName, region, region)
					}
					if region == tt.witness {
						t.Errorf("a lock service stack in the witness Region %s", region)
					}
					match(t, "no table of its own", func() {
						s.tmpl.ResourceCountIs(jsii.String("AWS::DynamoDB::Table"), jsii.Number(0))
						s.tmpl.ResourceCountIs(jsii.String("AWS::DynamoDB::GlobalTable"), jsii.Number(0))
					})
					match(t, "an API, 8 functions, a route per lock row (no admin API)", func() {
						s.tmpl.ResourceCountIs(jsii.String("AWS::ApiGatewayV2::Api"), jsii.Number(1))
						s.tmpl.ResourceCountIs(jsii.String("AWS::Lambda::Function"), jsii.Number(8))
						s.tmpl.ResourceCountIs(jsii.String("AWS::ApiGatewayV2::Route"), jsii.Number(float64(len(s.routes))))
						s.tmpl.ResourceCountIs(jsii.String("AWS::CloudWatch::Dashboard"), jsii.Number(1))
					})
					for _, r := range s.routes {
						if got := s.props(t, s.routeResource(t, r))["AuthorizationType"]; got != "AWS_IAM" {
							t.Errorf("route %q: got AuthorizationType %v, want AWS_IAM", r.Key(), got)
						}
					}
					fns := s.functions(t)
					for _, name := range s.fnNames {
						env, _ := s.props(t, fns[name])["Environment"].(map[string]any)
						vars, _ := env["Variables"].(map[string]any)
						checkEnv(t, name, vars, tableName, s.name)
					}
					// The roles name the replica of this Region, by name.
					wantARN := "arn:AWS::Partition:dynamodb:" + region + ":AWS::AccountId:table/" + tableName
					checkLeastPrivilege(t, s, func(res any) bool { return render(res, nil) == wantARN })
					// Deployed after the table, and sharing nothing with it
					// or the other Regions but the table's name.
					if deps := s.stack.Dependencies(); deps == nil || !slices.ContainsFunc(*deps, func(d awscdk.Stack) bool {
						return *d.StackName() == tbl.name
					}) {
						t.Errorf("stack %s does not depend on %s", s.name, tbl.name)
					}
					raw, _ := json.Marshal(s.tmpl.ToJSON())
					if strings.Contains(string(raw), "Fn::ImportValue") {
						t.Errorf("template imports a value: a cross-stack reference")
					}
					for k, o := range s.out {
						if _, ok := o.(map[string]any)["Export"]; ok {
							t.Errorf("output %s is exported", k)
						}
					}
					match(t, "table alarms on the replica", func() {
						s.tmpl.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), map[string]any{
							"Metrics": assertions.Match_ArrayWith(&[]any{assertions.Match_ObjectLike(&map[string]any{
								"MetricStat": map[string]any{"Metric": map[string]any{
									"Namespace":  "AWS/DynamoDB",
									"MetricName": "ThrottledRequests",
									"Dimensions": assertions.Match_ArrayWith(&[]any{
										map[string]any{"Name": "TableName", "Value": tableName},
									}),
								}},
							})}),
						})
					})
					match(t, "service alarms in this stack's namespace", func() {
						s.tmpl.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), map[string]any{
							"Metrics": assertions.Match_ArrayWith(&[]any{assertions.Match_ObjectLike(&map[string]any{
								"MetricStat": assertions.Match_ObjectLike(&map[string]any{"Metric": assertions.Match_ObjectLike(&map[string]any{
									"Namespace":  s.name,
									"MetricName": "Requests",
								})}),
							})}),
						})
					})
				})
			}
		})
	}
}

// TestMultiRegionRejectedByCDK checks that a Region set DynamoDB would
// refuse for MRSC fails NewApp with an error, not a panic.
func TestMultiRegionRejectedByCDK(t *testing.T) {
	dir := t.TempDir()
	fns, err := Functions(api.Routes)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fns {
		writeBootstrap(t, filepath.Join(dir, f.Name, "bootstrap"))
	}
	ctx := map[string]any{"assetDir": dir, "regions": "us-east-1,eu-west-1", "witness": "us-west-2"}
	_, _, err = NewApp(&awscdk.AppProps{Outdir: jsii.String(filepath.Join(dir, "out")), Context: &ctx})
	if err == nil || !strings.Contains(err.Error(), "eu-west-1") {
		t.Fatalf("got error %v, want one naming eu-west-1 (another Region set than us-east-1)", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "out", "manifest.json")); err == nil {
		t.Errorf("a cloud assembly was written for a rejected app")
	}
}
