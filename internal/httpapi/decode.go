package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/gpuaas/gpuaas/internal/cloudevents"
	"github.com/gpuaas/gpuaas/internal/errdefs"
)

// decode reads one JSON object from the body into v, strictly: unknown
// fields, trailing data, wrong types and oversized bodies are refused with a
// message that names the problem.
func decode(r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return &errdefs.Error{Kind: errdefs.KindInvalidArgument, Code: "unsupported_media_type",
				Message: "send the body as application/json"}
		}
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return decodeError(err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return decodeError(io.EOF)
	}
	if err := checkTextLimits(body); err != nil {
		return err
	}
	if err := checkJSONText(body); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errdefs.Invalid("malformed_json", "the body must hold exactly one JSON object; found data after it")
	}
	return nil
}

func decodeError(err error) error {
	var (
		syn      *json.SyntaxError
		typ      *json.UnmarshalTypeError
		tooLarge *http.MaxBytesError
	)
	switch {
	case errors.Is(err, io.EOF):
		return errdefs.Invalid("empty_body", "the request body is empty; send a JSON object")
	case errors.As(err, &tooLarge):
		return &errdefs.Error{Kind: errdefs.KindTooLarge, Code: "body_too_large",
			Message: fmt.Sprintf("the request body is larger than the %d-byte limit", tooLarge.Limit)}
	case errors.As(err, &syn):
		return errdefs.Invalid("malformed_json", "the body is not valid JSON (error at byte %d): %v", syn.Offset, syn)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errdefs.Invalid("malformed_json", "the body is not valid JSON: it ends too early")
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			return errdefs.Invalid("invalid_json_type", "the body must be a JSON object, not %s", typ.Value)
		}
		return errdefs.Invalid("invalid_field_type", "field %q must be of type %s, not %s", field, jsonType(typ.Type.Kind().String()), typ.Value).
			WithDetails(map[string]any{"fields": []errdefs.FieldError{{Field: "/" + strings.ReplaceAll(field, ".", "/"), Code: "invalid_type",
				Message: "must be " + jsonType(typ.Type.Kind().String())}}})
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.TrimPrefix(err.Error(), "json: unknown field ")
		return errdefs.Invalid("unknown_field", "unknown field %s; check the field names against the API reference", name)
	}
	return errdefs.Invalid("malformed_json", "the body could not be read as JSON: %v", err)
}

func jsonType(goKind string) string {
	switch goKind {
	case "string":
		return "string"
	case "bool":
		return "boolean"
	case "slice", "array":
		return "array"
	case "map", "struct", "ptr":
		return "object"
	}
	return "number"
}

// required returns a validation error listing the empty required fields.
func required(fields map[string]string) error {
	var fe []errdefs.FieldError
	for name, v := range fields {
		if strings.TrimSpace(v) == "" {
			fe = append(fe, errdefs.FieldError{Field: "/" + name, Code: "required", Message: "is required"})
		}
	}
	if fe == nil {
		return nil
	}
	sortFieldErrors(fe)
	return errdefs.Validation(fe)
}

// Free text has limits a person can read in the contract: a reason is at
// most MaxReasonLen characters, any other string in a JSON body at most
// MaxTextLen (a JWT assertion is not free text and has its own limit). Structured documents (config, parameters) are bounded by the
// body limit and by their own schemas.
const (
	MaxReasonLen = 1024
	MaxTextLen   = 8192
)

// checkTextLimits walks every string of a JSON body and refuses one past its
// limit, naming the field. Invalid JSON is left to the decoder.
func checkTextLimits(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	var path []string // JSON pointer segments of the value being read
	type frame struct {
		object  bool
		wantKey bool
		index   int
	}
	var stack []frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		top := len(stack) - 1
		if top >= 0 && stack[top].object && stack[top].wantKey {
			if key, ok := tok.(string); ok {
				path = append(path[:top], key)
				stack[top].wantKey = false
				continue
			}
		}
		if top >= 0 && !stack[top].object {
			path = append(path[:top], fmt.Sprint(stack[top].index))
			stack[top].index++
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{', '[':
				stack = append(stack, frame{object: v == '{', wantKey: v == '{'})
				continue
			case '}', ']':
				stack = stack[:len(stack)-1]
				path = path[:min(len(path), len(stack))]
			}
		case string:
			limit := MaxTextLen
			if len(path) > 0 {
				switch key := path[len(path)-1]; {
				case strings.HasSuffix(key, "reason"):
					limit = MaxReasonLen
				case key == "assertion":
					// A signed JWT, not free text: the token route's body
					// limit bounds it, and the exchange names an oversized
					// one itself (assertion_too_large).
					limit = -1
				}
			}
			if n := utf8.RuneCountInString(v); limit >= 0 && n > limit {
				field := "/" + strings.Join(path, "/")
				return errdefs.Validation([]errdefs.FieldError{{Field: field, Code: "too_long",
					Message: fmt.Sprintf("must be at most %d characters (got %d)", limit, n)}})
			}
		}
		if len(stack) > 0 && stack[len(stack)-1].object {
			stack[len(stack)-1].wantKey = true
		}
	}
}

// readCloudEvents reads a structured-mode CloudEvents body: one event
// (application/cloudevents+json) or a batch
// (application/cloudevents-batch+json); plain application/json is read as
// either, by its first character.
func readCloudEvents(r *http.Request) (body []byte, batch bool, err error) {
	mt := cloudevents.MediaTypeEvent
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err = mime.ParseMediaType(ct); err != nil {
			mt = ""
		}
	}
	if body, err = io.ReadAll(r.Body); err != nil {
		return nil, false, decodeError(err)
	}
	switch mt {
	case cloudevents.MediaTypeBatch:
		batch = true
	case cloudevents.MediaTypeEvent:
	case "application/json":
		batch = strings.HasPrefix(strings.TrimSpace(string(body)), "[")
	default:
		return nil, false, errdefs.Invalid("unsupported_media_type", "send events as %s (one event) or %s (an array of events)",
			cloudevents.MediaTypeEvent, cloudevents.MediaTypeBatch)
	}
	return body, batch, nil
}
