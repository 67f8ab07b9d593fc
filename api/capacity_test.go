package api

import (
	"net/http"
	"testing"
)

// TestOpenAPIGatewayRefusals: every operation documents the answers of the
// stack's capacity bounds (see Capacity) — API Gateway's 429 for a route
// over its throttle and its 500 for an invocation Lambda refused — as
// application/json {"message": string}, the shared GatewayMessage, so a
// client generated from the document knows them and internal/verify/contract accepts
// the local runner's.
func TestOpenAPIGatewayRefusals(t *testing.T) {
	doc := loadOpenAPI(t)
	for _, rt := range Routes {
		item := doc.Paths.Find(rt.Path)
		if item == nil || item.GetOperation(rt.Method) == nil {
			t.Errorf("%s: not in api/openapi.yaml", rt.Key())
			continue
		}
		op := item.GetOperation(rt.Method)
		for _, status := range []int{http.StatusTooManyRequests, http.StatusInternalServerError} {
			resp := op.Responses.Status(status)
			if resp == nil || resp.Value == nil {
				t.Errorf("%s: %d is not documented", rt.Key(), status)
				continue
			}
			mt := resp.Value.Content.Get("application/json")
			if mt == nil || mt.Schema == nil || mt.Schema.Ref != "#/components/schemas/GatewayMessage" {
				t.Errorf("%s: %d does not document application/json GatewayMessage", rt.Key(), status)
			}
		}
	}
	msg := doc.Components.Schemas["GatewayMessage"]
	if msg == nil {
		t.Fatal("no components.schemas.GatewayMessage")
	}
	if p := msg.Value.Properties["message"]; p == nil || !p.Value.Type.Is("string") || len(msg.Value.Required) != 1 {
		t.Errorf("GatewayMessage: got %v required, message %v, want one required string member, message", msg.Value.Required, p)
	}
}
