package fence_test

import (
	"fmt"
	"log"

	"github.com/ft288/locks/client/fence"
)

// An UpdateItem's own expressions, with the fence of token 42 merged in.
// The values map to add to ExpressionAttributeValues holds numbers: in the
// AWS SDK, &types.AttributeValueMemberN{Value: v} for each.
func ExampleDynamoDB_Merge() {
	e, err := fence.NewDynamoDB(42).Merge(fence.Expressions{
		Condition: "attribute_not_exists(#st) OR #st <> :paid",
		Update:    "SET payee = :payee, amount = :amount REMOVE draft",
		Names:     map[string]string{"#st": "status"},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("ConditionExpression:", e.Condition)
	fmt.Println("UpdateExpression:   ", e.Update)
	fmt.Println("Names:              ", e.Names)
	fmt.Println("fence's Values:     ", e.Values)
	// Output:
	// ConditionExpression: (attribute_not_exists(#st) OR #st <> :paid) AND (attribute_not_exists(#fence) OR #fence <= :fence)
	// UpdateExpression:    SET #fence = :fence, payee = :payee, amount = :amount REMOVE draft
	// Names:               map[#fence:fence #st:status]
	// fence's Values:      map[:fence:42]
}
