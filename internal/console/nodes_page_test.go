package console

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpuaas/gpuaas/client"
)

// The nodes page says a down node was drained: it comes back draining, and
// the state alone ("down") would not tell the admin the drain was taken.
func TestNodesPageShowsADrainOfADownNode(t *testing.T) {
	c, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	c.render(rec, httptest.NewRequest("GET", "/admin/nodes", nil), 200, "nodes", page{Title: "Nodes", Data: nodesData{Items: []client.Node{
		{ID: "n-down", Name: "gpu-a", State: "down", DrainRequested: true},
		{ID: "n-ready", Name: "gpu-b", State: "ready"},
		{ID: "n-draining", Name: "gpu-c", State: "draining", DrainRequested: true},
	}}})
	body := rec.Body.String()
	if rec.Code != 200 || strings.Count(body, "drain requested") != 1 {
		t.Fatalf("%d, %d notes of a drain, want 1 (the down node's):\n%s", rec.Code, strings.Count(body, "drain requested"), body)
	}
	if i, j := strings.Index(body, "gpu-a"), strings.Index(body, "drain requested"); j < i || j > strings.Index(body, "gpu-b") {
		t.Errorf("the note is not on the down node's row")
	}
}
