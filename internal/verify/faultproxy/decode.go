package faultproxy

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Call is a record's DynamoDB request and the store's answer, decoded for a
// checker: which item a request touched, with which expression values, and
// what the store wrote or returned. Attribute values are flattened to text:
// a string as is, a number as its decimal digits, a boolean as true/false.
type Call struct {
	// Key is the request's item key (GetItem, UpdateItem).
	Key map[string]string
	// UpdateExpression and ConditionExpression are the request's, with
	// Names and Values their expression attribute names and values.
	UpdateExpression    string
	ConditionExpression string
	Names               map[string]string
	Values              map[string]string
	// ConsistentRead and ProjectionExpression are GetItem's: a strongly
	// consistent read, and the attributes it asked for (empty: all).
	ConsistentRead       bool
	ProjectionExpression string
	// Item is the item the store returned: UpdateItem's Attributes
	// (ReturnValues) or GetItem's Item; nil when it returned none (for
	// GetItem: the item does not exist).
	Item map[string]string
	// ErrorType is the store's error (the part of __type after '#', e.g.
	// ConditionalCheckFailedException), empty for a 200 answer.
	ErrorType string
}

// Decode decodes the record's request body and, when the store answered,
// its answer.
func (r Record) Decode() (Call, error) {
	var req struct {
		Key                       map[string]attr
		UpdateExpression          string
		ConditionExpression       string
		ExpressionAttributeNames  map[string]string
		ExpressionAttributeValues map[string]attr
		ConsistentRead            bool
		ProjectionExpression      string
	}
	if err := json.Unmarshal(r.Body, &req); err != nil {
		return Call{}, fmt.Errorf("record %d: request: %w", r.Seq, err)
	}
	c := Call{
		Key:                 flatten(req.Key),
		UpdateExpression:    req.UpdateExpression,
		ConditionExpression: req.ConditionExpression,
		Names:               req.ExpressionAttributeNames,
		Values:              flatten(req.ExpressionAttributeValues),

		ConsistentRead:       req.ConsistentRead,
		ProjectionExpression: req.ProjectionExpression,
	}
	if !r.Forwarded || r.ForwardErr != "" || len(r.StoreBody) == 0 {
		return c, nil
	}
	var ans struct {
		Attributes map[string]attr
		Item       map[string]attr
		Type       string `json:"__type"`
	}
	if err := json.Unmarshal(r.StoreBody, &ans); err != nil {
		return c, fmt.Errorf("record %d: answer: %w", r.Seq, err)
	}
	switch {
	case ans.Attributes != nil:
		c.Item = flatten(ans.Attributes)
	case ans.Item != nil:
		c.Item = flatten(ans.Item)
	}
	if r.StoreStatus != 200 {
		c.ErrorType = ans.Type[strings.LastIndexByte(ans.Type, '#')+1:]
	}
	return c, nil
}

// attr is a DynamoDB attribute value in its JSON form ({"S": "x"}).
type attr struct {
	S    *string
	N    *string
	BOOL *bool
}

func flatten(m map[string]attr) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		switch {
		case v.S != nil:
			out[k] = *v.S
		case v.N != nil:
			out[k] = *v.N
		case v.BOOL != nil:
			out[k] = strconv.FormatBool(*v.BOOL)
		}
	}
	return out
}
