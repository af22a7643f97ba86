package client

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func TestReadSSE(t *testing.T) {
	in := "retry: 1000\n: hello\n\nid: 1\nevent: a.b.c\ndata: {\"x\":\ndata: 1}\n\n: keep-alive\n\nid: 2\ndata:{}\n\nid: 7\n: opening\n\n"
	var got []SSEMessage
	err := ReadSSE(strings.NewReader(in), func(m SSEMessage) error { got = append(got, m); return nil })
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("end of stream: %v", err)
	}
	if len(got) != 3 || got[0] != (SSEMessage{ID: "1", Event: "a.b.c", Data: "{\"x\":\n1}"}) || got[1] != (SSEMessage{ID: "2", Data: "{}"}) || got[2] != (SSEMessage{ID: "7"}) {
		t.Fatalf("messages: %+v", got)
	}
}

// FuzzReadSSE: a stream body is untrusted input; the parser must not panic
// and must only deliver messages that carried data or an id.
func FuzzReadSSE(f *testing.F) {
	for _, s := range []string{"", "id: 1\ndata: {}\n\n", ":\n\n", "data\n\n", "id:\nevent:\ndata: a\ndata: b\n\n", "data: " + strings.Repeat("x", 1000) + "\n\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_ = ReadSSE(strings.NewReader(s), func(m SSEMessage) error {
			if strings.Contains(m.ID, "\n") {
				t.Fatalf("id spans lines: %q", m.ID)
			}
			return nil
		})
	})
}
