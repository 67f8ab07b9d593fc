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
	// ValueLists and ItemLists are the list attributes of Values and of
	// Item (a lock's queue: a list of maps), each element a map flattened
	// as above; an empty list is an empty, non-nil slice. Elements that
	// are not maps are left out.
	ValueLists map[string][]map[string]string
	ItemLists  map[string][]map[string]string
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
		ValueLists:          lists(req.ExpressionAttributeValues),

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
		c.Item, c.ItemLists = flatten(ans.Attributes), lists(ans.Attributes)
	case ans.Item != nil:
		c.Item, c.ItemLists = flatten(ans.Item), lists(ans.Item)
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
	L    []attr
	M    map[string]attr
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

// lists returns the list attributes of m, each element that is a map
// flattened; nil when m has none.
func lists(m map[string]attr) map[string][]map[string]string {
	var out map[string][]map[string]string
	for k, v := range m {
		if v.L == nil {
			continue
		}
		if out == nil {
			out = map[string][]map[string]string{}
		}
		l := make([]map[string]string, 0, len(v.L))
		for _, e := range v.L {
			if e.M != nil {
				l = append(l, flatten(e.M))
			}
		}
		out[k] = l
	}
	return out
}
