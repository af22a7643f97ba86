package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/gpuaas/gpuaas/internal/errdefs"
)

// Text the API stores must be valid UTF-8 without NUL: PostgreSQL refuses
// both (a 500 if they reach it) and SQLite would store them silently. They
// are refused here, at the edge, the same way on both dialects.

// encodedHeaders are the request headers whose values reach the domain or
// the database.
var encodedHeaders = []string{"Authorization", "X-Idempotency-Key", "Idempotency-Key", "Content-Type"}

func errEncoding(where string) error {
	return errdefs.Invalid("invalid_encoding", "%s must be valid UTF-8 text without NUL characters", where)
}

func cleanText(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// checkEncoding refuses a request whose path, query or consumed headers hold
// invalid UTF-8 or NUL.
func checkEncoding(r *http.Request) error {
	if !cleanText(r.URL.Path) {
		return errEncoding("the request path")
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return errdefs.Invalid("invalid_encoding", "the query string is not valid URL encoding: %v", err)
	}
	for k, vs := range q {
		if !cleanText(k) {
			return errEncoding("query parameter names")
		}
		for _, v := range vs {
			if !cleanText(v) {
				return errEncoding("query parameter " + strings.ToValidUTF8(k, "?"))
			}
		}
	}
	for _, h := range encodedHeaders {
		for _, v := range r.Header.Values(h) {
			if !cleanText(v) {
				return errEncoding("the " + h + " header")
			}
		}
	}
	return nil
}

// checkJSONText refuses a JSON body with invalid UTF-8 (which encoding/json
// would silently replace) or a NUL in any key or string value.
func checkJSONText(body []byte) error {
	if !utf8.Valid(body) {
		return errEncoding("the request body")
	}
	if !bytes.Contains(body, []byte(`\u0000`)) {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil // syntax errors are reported by the strict decode
		}
		if s, ok := tok.(string); ok && strings.ContainsRune(s, 0) {
			return errEncoding("strings in the request body")
		}
	}
}
