package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// A stream started from "now" resumes, after a reconnect before any event,
// from the sequence its opening named, not from a later "now".
func TestFollowEventsResumesFromOpening(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.Header.Get("Last-Event-ID"))
		n := len(asked)
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		if n == 1 { // the opening, then the connection drops
			fmt.Fprint(w, "retry: 1000\nid: 41\n: stream after 41\n\n")
			return
		}
		fmt.Fprint(w, "retry: 1000\nid: 41\n: stream after 41\n\nid: 42\nevent: a.b\ndata: {\"id\":\"e42\",\"sequence\":42}\n\n")
	}))
	defer srv.Close()
	stop := errors.New("stop")
	var got []int64
	err := New(srv.URL, "t").FollowEvents(context.Background(), "/p", EventFilter{}, ResumeNow, func(e Event) error {
		got = append(got, e.Sequence)
		return stop
	})
	if !errors.Is(err, stop) || len(got) != 1 || got[0] != 42 {
		t.Fatalf("events %v, err %v", got, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 2 || asked[0] != ResumeNow || asked[1] != "41" {
		t.Fatalf("Last-Event-ID sent: %q", asked)
	}
}
