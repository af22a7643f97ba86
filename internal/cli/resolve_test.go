package cli

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gpuaas/gpuaas/client"
)

// A list whose server answers the same next_cursor again ends with an
// error naming the fault, not with the CLI asking for that page for ever.
// (The fake gives up after 100 requests, so a walk without the check ends
// too, with another error.)
func TestPageWalksStopOnARepeatedCursor(t *testing.T) {
	var requests atomic.Int64
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) > 100 {
			http.Error(w, "the walk never ends", http.StatusTeapot)
			return
		}
		id := "11111111-1111-1111-1111-111111111111"
		_, _ = w.Write([]byte(`{"items":[{"id":"` + id + `","slug":"other"}],"next_cursor":"again"}`))
	}))
	defer s.Close()
	c := client.New(s.URL, "token")
	walks := map[string]func() error{
		"findSlug":           func() error { _, err := resolveOrg(t.Context(), c, "mine"); return err },
		"projectsOfEveryOrg": func() error { _, err := projectsOfEveryOrg(t.Context(), c); return err },
	}
	for name, walk := range walks {
		requests.Store(0)
		if err := walk(); err == nil || !strings.Contains(err.Error(), `next_cursor "again" twice`) || requests.Load() > 3 {
			t.Errorf("%s: %d requests, err %v", name, requests.Load(), err)
		}
	}
}
