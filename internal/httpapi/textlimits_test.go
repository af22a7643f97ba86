package httpapi

import (
	"strings"
	"testing"

	"github.com/gpuaas/gpuaas/internal/errdefs"
)

func TestTextLimitsNameTheField(t *testing.T) {
	t.Parallel()
	long := func(n int) string { return strings.Repeat("é", n) } // runes, not bytes
	cases := []struct {
		body, field string
	}{
		{`{"reason":"` + long(MaxReasonLen+1) + `"}`, "/reason"},
		{`{"a":{"revoke_reason":"` + long(MaxReasonLen+1) + `"}}`, "/a/revoke_reason"},
		{`{"name":"` + long(MaxTextLen+1) + `"}`, "/name"},
		{`{"list":["ok",{"x":1},"` + long(MaxTextLen+1) + `"]}`, "/list/2"},
		{`{"a":[1,2],"b":{"c":[{"d":"` + long(MaxTextLen+1) + `"}]}}`, "/b/c/0/d"},
	}
	for _, tc := range cases {
		err := checkTextLimits([]byte(tc.body))
		e, ok := errdefs.As(err)
		if !ok || e.Code != "validation_failed" {
			t.Fatalf("%s…: %v", tc.body[:20], err)
		}
		fields := e.Details["fields"].([]errdefs.FieldError)
		if fields[0].Field != tc.field || fields[0].Code != "too_long" {
			t.Fatalf("field %+v, want %s", fields[0], tc.field)
		}
	}
	for _, ok := range []string{
		`{"reason":"` + long(MaxReasonLen) + `"}`,
		`{"name":"` + long(MaxTextLen) + `","reason":"short"}`,
		`not json`,
		`{"reason_code":1}`,
	} {
		if err := checkTextLimits([]byte(ok)); err != nil {
			t.Fatalf("refused %q…: %v", ok[:min(20, len(ok))], err)
		}
	}
}
