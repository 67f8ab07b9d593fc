package fence_test

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/ft288/locks/client/fence"
)

// item is a DynamoDB item of numbers, enough to evaluate the expressions
// of these tests: internal/integration's TestFenceDynamoDB holds the same
// merges to dynalite.
type item map[string]int64

// clone returns a copy of it.
func (it item) clone() item {
	out := make(item, len(it))
	for k, v := range it {
		out[k] = v
	}
	return out
}

// expr evaluates condition and update expressions over names and values
// the way DynamoDB does for the subset they use: attribute_exists,
// attribute_not_exists, comparisons (false when an attribute is absent),
// AND, OR, NOT and parentheses; SET path = operand, REMOVE path and ADD
// path operand.
type expr struct {
	names  map[string]string
	values map[string]int64
	toks   []string
	pos    int
}

var tokenRE = regexp.MustCompile(`\s*(<=|>=|<>|[(),=<>]|[#:][A-Za-z0-9_]+|[A-Za-z_][A-Za-z0-9_]*|\d+)`)

func newExpr(s string, names map[string]string, values map[string]int64) (*expr, error) {
	e := &expr{names: names, values: values}
	rest := s
	for strings.TrimSpace(rest) != "" {
		m := tokenRE.FindStringSubmatchIndex(rest)
		if m == nil || m[0] != 0 {
			return nil, fmt.Errorf("cannot tokenize %q at %q", s, rest)
		}
		e.toks = append(e.toks, rest[m[2]:m[3]])
		rest = rest[m[1]:]
	}
	return e, nil
}

func (e *expr) peek() string {
	if e.pos < len(e.toks) {
		return e.toks[e.pos]
	}
	return ""
}

func (e *expr) next() string { t := e.peek(); e.pos++; return t }

func (e *expr) expect(t string) error {
	if got := e.next(); got != t {
		return fmt.Errorf("got %q, want %q in %v", got, t, e.toks)
	}
	return nil
}

func isWord(t, w string) bool { return strings.EqualFold(t, w) }

// path resolves an attribute name token (#placeholder or bare name).
func (e *expr) path(t string) (string, error) {
	if strings.HasPrefix(t, "#") {
		n, ok := e.names[t]
		if !ok {
			return "", fmt.Errorf("name %s not defined", t)
		}
		return n, nil
	}
	if t == "" || strings.HasPrefix(t, ":") || strings.ContainsAny(t[:1], "0123456789(),=<>") {
		return "", fmt.Errorf("%q is not a path", t)
	}
	return t, nil
}

// operand returns an operand's value and whether it has one.
func (e *expr) operand(it item) (int64, bool, error) {
	t := e.next()
	if strings.HasPrefix(t, ":") {
		v, ok := e.values[t]
		if !ok {
			return 0, false, fmt.Errorf("value %s not defined", t)
		}
		return v, true, nil
	}
	p, err := e.path(t)
	if err != nil {
		return 0, false, err
	}
	v, ok := it[p]
	return v, ok, nil
}

// condition evaluates the whole token list as a condition over it.
func (e *expr) condition(it item) (bool, error) {
	ok, err := e.or(it)
	if err == nil && e.pos != len(e.toks) {
		err = fmt.Errorf("trailing %v", e.toks[e.pos:])
	}
	return ok, err
}

func (e *expr) or(it item) (bool, error) {
	v, err := e.and(it)
	for err == nil && isWord(e.peek(), "OR") {
		e.next()
		var w bool
		w, err = e.and(it)
		v = v || w
	}
	return v, err
}

func (e *expr) and(it item) (bool, error) {
	v, err := e.not(it)
	for err == nil && isWord(e.peek(), "AND") {
		e.next()
		var w bool
		w, err = e.not(it)
		v = v && w
	}
	return v, err
}

func (e *expr) not(it item) (bool, error) {
	if isWord(e.peek(), "NOT") {
		e.next()
		v, err := e.not(it)
		return !v, err
	}
	return e.primary(it)
}

func (e *expr) primary(it item) (bool, error) {
	switch t := e.peek(); {
	case t == "(":
		e.next()
		v, err := e.or(it)
		if err == nil {
			err = e.expect(")")
		}
		return v, err
	case t == "attribute_exists" || t == "attribute_not_exists":
		e.next()
		if err := e.expect("("); err != nil {
			return false, err
		}
		p, err := e.path(e.next())
		if err != nil {
			return false, err
		}
		if err := e.expect(")"); err != nil {
			return false, err
		}
		_, ok := it[p]
		return ok == (t == "attribute_exists"), nil
	}
	a, aok, err := e.operand(it)
	if err != nil {
		return false, err
	}
	op := e.next()
	b, bok, err := e.operand(it)
	if err != nil {
		return false, err
	}
	if !aok || !bok {
		return false, nil
	}
	switch op {
	case "=":
		return a == b, nil
	case "<>":
		return a != b, nil
	case "<":
		return a < b, nil
	case "<=":
		return a <= b, nil
	case ">":
		return a > b, nil
	case ">=":
		return a >= b, nil
	}
	return false, fmt.Errorf("unknown comparator %q", op)
}

// update applies the whole token list as an update expression to a copy
// of it, failing when two actions write the same attribute or a clause
// comes twice, as DynamoDB does.
func (e *expr) update(it item) (item, error) {
	out := it.clone()
	written := map[string]bool{}
	seen := map[string]bool{}
	write := func(p string) error {
		if written[p] {
			return fmt.Errorf("two document paths overlap: %s", p)
		}
		written[p] = true
		return nil
	}
	for e.pos < len(e.toks) {
		clause := strings.ToUpper(e.next())
		if seen[clause] {
			return nil, fmt.Errorf("the %s clause comes twice", clause)
		}
		seen[clause] = true
		for {
			p, err := e.path(e.next())
			if err != nil {
				return nil, err
			}
			if err := write(p); err != nil {
				return nil, err
			}
			switch clause {
			case "SET":
				if err := e.expect("="); err != nil {
					return nil, err
				}
				v, ok, err := e.operand(it) // operands read the old item
				if err != nil {
					return nil, err
				}
				if !ok {
					return nil, fmt.Errorf("SET %s from an absent attribute", p)
				}
				out[p] = v
			case "REMOVE":
				delete(out, p)
			case "ADD":
				v, _, err := e.operand(it)
				if err != nil {
					return nil, err
				}
				out[p] += v
			default:
				return nil, fmt.Errorf("unknown clause %q", clause)
			}
			if e.peek() != "," {
				break
			}
			e.next()
		}
	}
	return out, nil
}

// write applies a merged write to it as DynamoDB would: the condition
// first (over the item as it is), then the update, or, with no update, the
// put of put. It returns the item after the write and whether the
// condition let it through; userValues are the caller's own values.
func write(it item, e fence.Expressions, userValues map[string]int64, put item) (item, bool, error) {
	values := map[string]int64{}
	for k, v := range userValues {
		values[k] = v
	}
	for k, v := range e.Values {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, false, fmt.Errorf("value %s: %q is not a number", k, v)
		}
		values[k] = n
	}
	// DynamoDB refuses names and values the expressions do not use.
	used := map[string]bool{}
	for _, s := range []string{e.Condition, e.Update} {
		x, err := newExpr(s, nil, nil)
		if err != nil {
			return nil, false, err
		}
		for _, t := range x.toks {
			used[t] = true
		}
	}
	for k := range e.Names {
		if !used[k] {
			return nil, false, fmt.Errorf("name %s unused in the expressions", k)
		}
	}
	for k := range values {
		if !used[k] {
			return nil, false, fmt.Errorf("value %s unused in the expressions", k)
		}
	}
	if e.Condition != "" {
		c, err := newExpr(e.Condition, e.Names, values)
		if err != nil {
			return nil, false, err
		}
		ok, err := c.condition(it)
		if err != nil || !ok {
			return it, false, err
		}
	}
	if e.Update == "" {
		return put.clone(), true, nil
	}
	u, err := newExpr(e.Update, e.Names, values)
	if err != nil {
		return nil, false, err
	}
	out, err := u.update(it)
	return out, err == nil, err
}
