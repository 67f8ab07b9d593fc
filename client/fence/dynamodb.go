package fence

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"strconv"
	"strings"
)

// The placeholders a fence uses unless the expressions it is merged into
// use them already.
const (
	defaultName  = "#fence"
	defaultValue = ":fence"
)

// DynamoDB is the fence of a DynamoDB item: a condition that lets a write
// through only while the item's fence attribute is absent or holds a token
// no larger than Token, and an update that stores Token there. The zero
// value has no token; make one with NewDynamoDB.
type DynamoDB struct {
	token     int64
	attribute string
}

// NewDynamoDB returns the fence of a lease's fencing token, stored in
// DefaultAttribute.
func NewDynamoDB(token int64) DynamoDB {
	return DynamoDB{token: token, attribute: DefaultAttribute}
}

// WithAttribute returns f storing its token in the attribute name instead:
// one attribute per independently fenced lock, e.g. per semaphore slot.
func (f DynamoDB) WithAttribute(name string) DynamoDB {
	f.attribute = name
	return f
}

// Token returns the fencing token.
func (f DynamoDB) Token() int64 { return f.token }

// Attribute returns the name of the attribute that stores the token.
func (f DynamoDB) Attribute() string { return f.attribute }

// Number returns the token as a DynamoDB number (type N): the decimal
// string types.AttributeValueMemberN takes, e.g. for a PutItem's item.
func (f DynamoDB) Number() string { return strconv.FormatInt(f.token, 10) }

// Condition returns the fence's condition expression,
// `attribute_not_exists(#fence) OR #fence <= :fence`, over Names and
// Values.
func (f DynamoDB) Condition() string { return condition(defaultName, defaultValue) }

// Update returns the fence's update expression, `SET #fence = :fence`,
// over Names and Values.
func (f DynamoDB) Update() string { return "SET " + setAction(defaultName, defaultValue) }

// Names returns the expression attribute names of Condition and Update:
// #fence, the attribute.
func (f DynamoDB) Names() map[string]string { return map[string]string{defaultName: f.attribute} }

// Values returns the expression attribute values of Condition and Update:
// :fence, the token as a number (see Number).
func (f DynamoDB) Values() map[string]string { return map[string]string{defaultValue: f.Number()} }

func condition(name, value string) string {
	return "attribute_not_exists(" + name + ") OR " + name + " <= " + value
}

func setAction(name, value string) string { return name + " = " + value }

// Expressions are the expressions of one DynamoDB write as the SDK's
// inputs take them. A PutItem, DeleteItem or ConditionCheck has a Condition
// only; an UpdateItem has an Update and may have a Condition.
type Expressions struct {
	// Condition is the ConditionExpression; "" for none.
	Condition string
	// Update is the UpdateExpression; "" for none (not an UpdateItem).
	Update string
	// Names are the ExpressionAttributeNames.
	Names map[string]string
	// Values are the number values (type N, in decimal) the fences merged
	// so far add to ExpressionAttributeValues; the write's other values
	// stay with the caller. Merge keeps these and adds its own.
	Values map[string]string
}

// Merge returns e with the fence added: its condition AND-ed with e's,
// `#fence = :fence` added to the SET clause of e's update (a SET clause
// added when e's update has none; nothing when e has no update: a PutItem
// must carry the attribute itself, Attribute = Number), the names added to
// e's Names and the token to e's Values, in new maps. It renames the
// fence's placeholders when e uses them already (#fence1, :fence1, …), so
// merging several fences into one write works. Merge fails when the token
// is not positive, the attribute is empty, or e's update writes the
// attribute itself.
func (f DynamoDB) Merge(e Expressions) (Expressions, error) {
	if f.token <= 0 {
		return Expressions{}, fmt.Errorf("fence: token %d, want a lease's fencing token (> 0)", f.token)
	}
	if f.attribute == "" {
		return Expressions{}, errors.New("fence: empty attribute name")
	}
	if path, ok := writesTopLevel(e.Update, e.Names, f.attribute); ok {
		return Expressions{}, fmt.Errorf("fence: the update already writes %s, the fence's attribute %q", path, f.attribute)
	}
	used := placeholders(e)
	name, value := unused(defaultName, used), unused(defaultValue, used)

	out := Expressions{
		Condition: condition(name, value),
		Update:    e.Update,
		Names:     make(map[string]string, len(e.Names)+1),
		Values:    make(map[string]string, len(e.Values)+1),
	}
	if strings.TrimSpace(e.Condition) != "" {
		out.Condition = "(" + e.Condition + ") AND (" + out.Condition + ")"
	}
	if strings.TrimSpace(e.Update) != "" {
		out.Update = addSet(e.Update, setAction(name, value))
	}
	maps.Copy(out.Names, e.Names)
	maps.Copy(out.Values, e.Values)
	out.Names[name] = f.attribute
	out.Values[value] = f.Number()
	return out, nil
}

// placeholderRE matches an expression attribute name (#x) or value (:x).
// DynamoDB's expressions have no string literals, so every match is one.
var placeholderRE = regexp.MustCompile(`[#:][A-Za-z0-9_]+`)

// placeholders returns every placeholder e's expressions use or its maps
// define.
func placeholders(e Expressions) map[string]bool {
	used := map[string]bool{}
	for _, s := range []string{e.Condition, e.Update} {
		for _, p := range placeholderRE.FindAllString(s, -1) {
			used[p] = true
		}
	}
	for k := range e.Names {
		used[k] = true
	}
	for k := range e.Values {
		used[k] = true
	}
	return used
}

// unused returns base, or base followed by the smallest number that makes
// it a placeholder used does not hold.
func unused(base string, used map[string]bool) string {
	p := base
	for i := 1; used[p]; i++ {
		p = base + strconv.Itoa(i)
	}
	return p
}

// setRE matches an update expression's SET keyword: a whole word, not part
// of a placeholder or of a nested attribute's path (a.set).
var setRE = regexp.MustCompile(`(?i)(^|[^A-Za-z0-9_#:.])(set)\b`)

// addSet returns update with action added first to its SET clause, or in a
// SET clause of its own before its other clauses.
func addSet(update, action string) string {
	m := setRE.FindStringSubmatchIndex(update)
	if m == nil {
		return "SET " + action + " " + update
	}
	end := m[5] // after the keyword
	return update[:end] + " " + action + "," + update[end:]
}

// clauseRE matches an update expression's clause keywords.
var clauseRE = regexp.MustCompile(`(?i)(^|[^A-Za-z0-9_#:.])(set|remove|add|delete)\b`)

// writesTopLevel reports whether an action of update writes a path that
// starts at the attribute attr (attr, attr.x, attr[0], or the same through
// a placeholder that names attr), and returns that path. DynamoDB refuses an
// update whose written paths overlap, as the fence's SET would with it;
// reading attr in an operand or a condition is fine.
func writesTopLevel(update string, names map[string]string, attr string) (string, bool) {
	clauses := clauseRE.FindAllStringSubmatchIndex(update, -1)
	for i, m := range clauses {
		end := len(update)
		if i+1 < len(clauses) {
			end = clauses[i+1][4] // where the next keyword starts
		}
		keyword := strings.ToUpper(update[m[4]:m[5]])
		for _, action := range splitTopLevel(update[m[5]:end]) {
			target := strings.TrimSpace(action)
			switch keyword {
			case "SET":
				target, _, _ = strings.Cut(target, "=")
			case "ADD", "DELETE":
				if f := strings.Fields(target); len(f) > 0 {
					target = f[0]
				}
			}
			target = strings.TrimSpace(target)
			first := target
			if j := strings.IndexAny(first, ".["); j >= 0 {
				first = first[:j]
			}
			if first == attr || (strings.HasPrefix(first, "#") && names[first] == attr) {
				return target, true
			}
		}
	}
	return "", false
}

// splitTopLevel splits a clause's actions at the commas outside
// parentheses (a function's arguments) and brackets.
func splitTopLevel(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, r := range s {
		switch r {
		case '(', '[':
			depth++
		case ')', ']':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}
