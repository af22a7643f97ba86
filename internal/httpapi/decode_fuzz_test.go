package httpapi

import (
	"net/http"
	"strings"
	"testing"

	"github.com/gpuaas/gpuaas/internal/errdefs"
)

// Request bodies are untrusted: decode must either fill the target or return
// a client error with a code and a message — never panic, never a 500.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{"slug":"a","name":"b"}`, `{"slug":1}`, `[]`, `{"x":`, ``, `{"slug":"a"} x`, `null`, `{"name":"\u0000"}`,
		`{"\u0000":1}`, "{\"name\":\"\xff\xfe\"}", "{\"slug\":\"\xc3\x28\"}", `{"name":"\\u0000"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		r, _ := http.NewRequest("POST", "/x", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Body = http.MaxBytesReader(nil, r.Body, 1<<16)
		var v struct {
			Slug string            `json:"slug"`
			Name string            `json:"name"`
			Tags map[string]string `json:"tags"`
			N    int               `json:"n"`
		}
		err := decode(r, &v)
		if err == nil {
			return
		}
		e, ok := errdefs.As(err)
		if !ok || e.Code == "" || e.Message == "" || (e.Kind != errdefs.KindInvalidArgument && e.Kind != errdefs.KindTooLarge) {
			t.Fatalf("body %q: unclassified error %v", body, err)
		}
	})
}
