package manifest

import (
	"encoding/json"
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

// jsonNumber checks a number's magnitude: the schema validator reads
// numbers as big.Rat and crashes on one it cannot hold (1e-99999999), so a
// number must be a finite float64 that does not underflow to zero. Its
// spelling is kept (wholeNumbers gives whole numbers the spelling Go's int
// fields decode).
func jsonNumber(s string) (json.Number, error) {
	f, err := strconv.ParseFloat(s, 64)
	mantissa, _, _ := strings.Cut(strings.ToLower(s), "e")
	if err != nil || (f == 0 && strings.ContainsAny(mantissa, "123456789")) {
		return "", fmt.Errorf("number %s is out of range", truncate(s, 40))
	}
	return json.Number(s), nil
}

// CheckNumbers finds a number in a decoded JSON document (numbers as
// json.Number) that a schema cannot be checked against (jsonNumber), for a
// document validated outside Parse: a launch's parameters. It returns the
// number's JSON pointer within doc and why.
func CheckNumbers(doc any) (string, error) {
	switch t := doc.(type) {
	case json.Number:
		if _, err := jsonNumber(t.String()); err != nil {
			return "", err
		}
	case map[string]any:
		for k, v := range t {
			if p, err := CheckNumbers(v); err != nil {
				return pointerJoin("", k) + p, err
			}
		}
	case []any:
		for i, v := range t {
			if p, err := CheckNumbers(v); err != nil {
				return pointerJoin("", strconv.Itoa(i)) + p, err
			}
		}
	}
	return "", nil
}

// verbatim are the members kept as their author wrote them (JSON Schemas
// and parameter documents, digested as written): wholeNumbers leaves them.
var verbatim = map[string]bool{"placement_schema": true, "config_schema": true, "parameters": true}

// WholeNumbers gives every whole number (json.Number, within int64) of a
// decoded JSON document one spelling, in a copy. JSON Schema calls 8080.0
// and 8.08e3 integers, and YAML writes a float of 1e6 or more as 1.6e+07,
// but encoding/json does not decode those into the Go int fields a schema
// vouched for: a document that passed validation would fail where it is
// read.
func WholeNumbers(doc any) any { return wholeNumbers(doc, nil) }

// wholeNumbers is WholeNumbers leaving the members named in keep as they
// are. A manifest version digests what its Go fields hold, so respelling
// changes no digest, except in its verbatim members, which are digested as
// written and so are left alone.
func wholeNumbers(v any, keep map[string]bool) any {
	switch t := v.(type) {
	case json.Number:
		if r, ok := new(big.Rat).SetString(t.String()); ok && r.IsInt() && r.Num().IsInt64() {
			return json.Number(r.Num().String())
		}
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			if keep[k] {
				out[k] = x
			} else {
				out[k] = wholeNumbers(x, keep)
			}
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = wholeNumbers(x, keep)
		}
		return out
	}
	return v
}
