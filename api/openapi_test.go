package api

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

// The document is read with openapi3 itself here: internal/verify/contract, which
// holds answers to it, imports this package.

func loadOpenAPI(tb testing.TB) *openapi3.T {
	tb.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(OpenAPI)
	if err != nil {
		tb.Fatalf("api/openapi.yaml: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		tb.Fatalf("api/openapi.yaml: %v", err)
	}
	return doc
}

// documentedRoutes lists the document's operations as "METHOD path
// operationId".
func documentedRoutes(doc *openapi3.T) []string {
	var out []string
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			out = append(out, method+" "+path+" "+op.OperationID)
		}
	}
	return out
}

// routeDrift returns what only one side has: route table rows (as "METHOD
// path name") missing from the document, and document operations that are
// not rows.
func routeDrift(documented []string, routes []Route) []string {
	var drift []string
	var table []string
	for _, r := range routes {
		row := r.Method + " " + r.Path + " " + r.OperationID()
		table = append(table, row)
		if !slices.Contains(documented, row) {
			drift = append(drift, "api.Routes has "+row+"; api/openapi.yaml does not")
		}
	}
	for _, op := range documented {
		if !slices.Contains(table, op) {
			drift = append(drift, "api/openapi.yaml has "+op+"; api.Routes does not")
		}
	}
	return drift
}

// TestOpenAPIRoutes: the document's paths and methods are exactly the route
// table's, and each operationId is the route's (and Lambda function's) name.
func TestOpenAPIRoutes(t *testing.T) {
	doc := loadOpenAPI(t)
	documented := documentedRoutes(doc)
	if drift := routeDrift(documented, Routes); len(drift) > 0 {
		t.Fatalf("api/openapi.yaml and api.Routes differ:\n%s", strings.Join(drift, "\n"))
	}
	// The comparison itself must see drift either way.
	t.Run("RouteWithoutDocument", func(t *testing.T) {
		extra := append(slices.Clone(Routes), Route{Name: "list", Method: "GET", Path: "/locks"})
		if drift := routeDrift(documented, extra); len(drift) != 1 {
			t.Errorf("got %v, want one difference: GET /locks list undocumented", drift)
		}
	})
	t.Run("DocumentWithoutRoute", func(t *testing.T) {
		if drift := routeDrift(documented, Routes[1:]); len(drift) != 1 {
			t.Errorf("got %v, want one difference: %s documented but not a route", drift, Routes[0].Key())
		}
	})
	t.Run("OtherName", func(t *testing.T) {
		renamed := slices.Clone(Routes)
		renamed[0].Name = "take"
		if drift := routeDrift(documented, renamed); len(drift) != 2 {
			t.Errorf("got %v, want two differences for a renamed route", drift)
		}
	})
}

// TestOpenAPIProblems: the document's problem types are exactly the error
// table's, each with its own schema pinning type and status, used by a
// response of that status. Answers the integration suites never see (500
// internal) are covered here.
func TestOpenAPIProblems(t *testing.T) {
	doc := loadOpenAPI(t)
	kinds := []problemKind{kindValidation, kindInvalidJSON, kindTooLarge, kindInternal}
	for _, row := range errorTable {
		if !slices.Contains(kinds, row.kind) { // refinements share their sentinel's kind
			kinds = append(kinds, row.kind)
		}
	}

	// Problem.type lists every type.
	var want []any
	for _, k := range kinds {
		want = append(want, ProblemTypeBase+k.slug)
	}
	problem := doc.Components.Schemas["Problem"]
	if problem == nil {
		t.Fatal("no components.schemas.Problem")
	}
	got := problem.Value.Properties["type"].Value.Enum
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("Problem.type lacks %v", w)
		}
	}
	for _, g := range got {
		if !slices.Contains(want, g) {
			t.Errorf("Problem.type lists %v, which no error table row answers", g)
		}
	}

	// Each kind has a schema {allOf: [Problem, {type: const, status: const}]}
	// that a documented problem+json answer of its status uses.
	pinned := map[string]string{} // "status type" → schema name
	for name, s := range doc.Components.Schemas {
		if len(s.Value.AllOf) != 2 || s.Value.AllOf[0].Ref != "#/components/schemas/Problem" {
			continue
		}
		props := s.Value.AllOf[1].Value.Properties
		if props["type"] == nil || props["status"] == nil {
			t.Errorf("%s extends Problem without pinning type and status", name)
			continue
		}
		pinned[fmt.Sprint(props["status"].Value.Const, " ", props["type"].Value.Const)] = name
	}
	used := map[string]bool{} // schema names used by a problem answer
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			for status, resp := range op.Responses.Map() {
				mt := resp.Value.Content.Get("application/problem+json")
				if mt == nil {
					continue
				}
				name := mt.Schema.Ref[len("#/components/schemas/"):]
				used[status+" "+name] = true
			}
		}
	}
	for _, k := range kinds {
		name, ok := pinned[fmt.Sprint(k.status, " ", ProblemTypeBase+k.slug)]
		if !ok {
			t.Errorf("%s (%d): no schema pins this type and status", k.slug, k.status)
			continue
		}
		if !used[fmt.Sprint(k.status, " ", name)] {
			t.Errorf("%s (%d): no operation answers %d with %s", k.slug, k.status, k.status, name)
		}
	}
	if len(pinned) != len(kinds) {
		t.Errorf("got %d pinned problem schemas %v, want one per kind of the error table (%d)", len(pinned), pinned, len(kinds))
	}
}
