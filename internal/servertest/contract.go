package servertest

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/gpuaas/gpuaas/api"
	"github.com/pb33f/libopenapi"
	"github.com/pb33f/libopenapi-validator/config"
	"github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/helpers"
	"github.com/pb33f/libopenapi-validator/paths"
	"github.com/pb33f/libopenapi-validator/radix"
	"github.com/pb33f/libopenapi-validator/responses"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	"github.com/pb33f/libopenapi/datamodel/high/base"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
)

// Contract validates responses against api/openapi.yaml with
// libopenapi-validator: the path template, method and status must be
// documented, the content type must be one the response documents, and a
// body must match the documented schema (OpenAPI 3.1, JSON Schema 2020-12).
// A few rules of this API the validator does not hold are checked here, each
// saying why below. Safe for concurrent use: one check at a time, because
// the validator renders and caches schemas in the shared model as it goes
// (libopenapi's DynamicValue is written during rendering), which the race
// detector caught with parallel tests sharing one Contract.
type Contract struct {
	mu        sync.Mutex
	model     *v3.Document
	opts      *config.ValidationOptions
	responses responses.ResponseBodyValidator
	schemas   schema_validation.SchemaValidator
	errSchema *base.Schema // #/components/schemas/Error, the envelope of every error
}

// LoadContract parses the embedded OpenAPI document.
func LoadContract() (*Contract, error) {
	doc, err := libopenapi.NewDocument(api.OpenAPI)
	if err != nil {
		return nil, fmt.Errorf("openapi.yaml: %w", err)
	}
	m, err := doc.BuildV3Model()
	if err != nil {
		return nil, fmt.Errorf("openapi.yaml: %w", err)
	}
	model := &m.Model
	opts := config.NewValidationOptions(config.WithPathTree(radix.BuildPathTree(model)))
	errProxy := model.Components.Schemas.GetOrZero("Error")
	if errProxy == nil {
		return nil, fmt.Errorf("openapi.yaml: no #/components/schemas/Error")
	}
	return &Contract{
		model:     model,
		opts:      opts,
		responses: responses.NewResponseBodyValidator(model, config.WithExistingOpts(opts)),
		schemas:   schema_validation.NewSchemaValidator(config.WithExistingOpts(opts)),
		errSchema: errProxy.Schema(),
	}, nil
}

// find matches method and a concrete path to a documented template the way
// the validator does (a literal segment beats a parameter, as in the
// server's mux: /app-artifacts/publish-intents beats /app-artifacts/{id}).
// item is nil when no template matches; op is nil when the template does not
// document method.
func (c *Contract) find(method, path string) (tmpl string, item *v3.PathItem, op *v3.Operation) {
	req := request(method, path)
	item, _, tmpl = paths.FindPath(req, c.model, c.opts)
	if item == nil {
		return "", nil, nil
	}
	return tmpl, item, helpers.ExtractOperation(req, item)
}

// request is what the validator locates an operation by. path is the
// decoded path as the server saw it, which may hold bytes that no URL
// parser takes back (a NUL refused as invalid_encoding), so it is set, not
// parsed.
func request(method, path string) *http.Request {
	return &http.Request{Method: method, URL: &url.URL{Path: path}, Header: http.Header{}}
}

// Template finds the documented path template matching a concrete path.
func (c *Contract) Template(path string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tmpl, item, _ := c.find(http.MethodGet, path)
	return tmpl, item != nil
}

// Check validates one response.
func (c *Contract) Check(method, path string, status int, header http.Header, body []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	tmpl, item, op := c.find(method, path)
	if item == nil || op == nil {
		// The mux answers an unknown path or method with the error
		// envelope; the validator knows no response for an operation that
		// is not there, so that answer is checked here.
		if status == http.StatusNotFound || status == http.StatusMethodNotAllowed {
			return c.validateError(body)
		}
		if item == nil {
			return fmt.Errorf("path %s is not in openapi.yaml", path)
		}
		return fmt.Errorf("%s %s is not in openapi.yaml", method, tmpl)
	}
	if status >= 400 {
		// Every error, documented per operation or not, is the envelope
		// (the validator checks only the schema a response documents).
		if err := c.validateError(body); err != nil {
			return fmt.Errorf("%s %s -> %d: %w", method, tmpl, status, err)
		}
	}
	// The validator lets `default` stand for any status; here it stands
	// for errors only: a success must be documented by its own code.
	var documented *v3.Response
	if op.Responses != nil {
		if op.Responses.Codes != nil {
			documented = op.Responses.Codes.GetOrZero(strconv.Itoa(status))
		}
		if documented == nil && status >= 400 {
			documented = op.Responses.Default
		}
	}
	if documented == nil {
		return fmt.Errorf("%s %s: status %d is not documented in openapi.yaml", method, tmpl, status)
	}
	// A response documented without content must have no body; the
	// validator validates only responses that declare content.
	if documented.Content == nil || documented.Content.Len() == 0 {
		if len(bytes.TrimSpace(body)) > 0 && status != http.StatusNoContent {
			return fmt.Errorf("%s %s -> %d: body present but none documented", method, tmpl, status)
		}
		return nil
	}
	req := request(method, path)
	resp := &http.Response{StatusCode: status, Header: header, Body: io.NopCloser(bytes.NewReader(body)), Request: req}
	if ok, verrs := c.responses.ValidateResponseBodyWithPathItem(req, resp, item, tmpl); !ok {
		return fmt.Errorf("%s %s -> %d: %s\nbody: %s", method, tmpl, status, describe(verrs), truncate(body))
	}
	return nil
}

// validateError checks body against the error envelope.
func (c *Contract) validateError(body []byte) error {
	if ok, verrs := c.schemas.ValidateSchemaBytes(c.errSchema, body); !ok {
		return fmt.Errorf("body does not match #/components/schemas/Error: %s\nbody: %s", describe(verrs), truncate(body))
	}
	return nil
}

// describe is the validator's findings, one per line, with the failing
// schema locations.
func describe(verrs []*errors.ValidationError) string {
	var b strings.Builder
	for i, e := range verrs {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(e.Message)
		if e.Reason != "" {
			b.WriteString(": " + e.Reason)
		}
		for _, se := range e.SchemaValidationErrors {
			fmt.Fprintf(&b, "\n  %s: %s", se.FieldPath, se.Reason)
			if se.KeywordLocation != "" {
				fmt.Fprintf(&b, " (%s)", se.KeywordLocation)
			}
		}
	}
	return b.String()
}

func truncate(b []byte) string {
	if len(b) > 600 {
		return string(b[:600]) + "…"
	}
	return string(b)
}
