package servertest

import (
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/gpuaas/gpuaas/api"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"gopkg.in/yaml.v3"
)

// Contract validates responses against api/openapi.yaml: the path template,
// method and status must be documented, and a JSON body must match the
// documented schema. Schemas are OpenAPI 3.1, i.e. JSON Schema 2020-12.
type Contract struct {
	doc      map[string]any
	compiler *jsonschema.Compiler
	mu       sync.Mutex
	cache    map[string]*jsonschema.Schema
}

const docURL = "file:///openapi.json"

// LoadContract parses the embedded OpenAPI document.
func LoadContract() (*Contract, error) {
	m, c, err := loadSchemaDoc("openapi.yaml", api.OpenAPI, docURL)
	if err != nil {
		return nil, err
	}
	return &Contract{doc: m, compiler: c, cache: map[string]*jsonschema.Schema{}}, nil
}

// loadSchemaDoc parses a YAML contract and registers it at url with a
// JSON Schema 2020-12 compiler, so schemas inside it compile by pointer.
func loadSchemaDoc(name string, yamlDoc []byte, url string) (map[string]any, *jsonschema.Compiler, error) {
	var raw any
	if err := yaml.Unmarshal(yamlDoc, &raw); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	// Round-trip through JSON so the compiler sees plain JSON values.
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, nil, err
	}
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(b)))
	if err != nil {
		return nil, nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(url, doc); err != nil {
		return nil, nil, err
	}
	m, _ := doc.(map[string]any)
	return m, c, nil
}

// Template finds the documented path template matching a concrete path.
func (c *Contract) Template(path string) (string, bool) {
	paths, _ := c.doc["paths"].(map[string]any)
	segs := strings.Split(strings.Trim(path, "/"), "/")
	// The most specific template wins (most literal segments), as in the
	// server's mux: /app-artifacts/publish-intents beats /app-artifacts/{id}.
	best, bestLiterals := "", -1
	for tmpl := range paths {
		ts := strings.Split(strings.Trim(tmpl, "/"), "/")
		if len(ts) != len(segs) {
			continue
		}
		ok, literals := true, 0
		for i := range ts {
			if strings.HasPrefix(ts[i], "{") {
				if segs[i] == "" {
					ok = false
				}
				continue
			}
			if ts[i] != segs[i] {
				ok = false
				break
			}
			literals++
		}
		if ok && literals > bestLiterals {
			best, bestLiterals = tmpl, literals
		}
	}
	return best, best != ""
}

func esc(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1") }

// Check validates one response.
func (c *Contract) Check(method, path string, status int, header http.Header, body []byte) error {
	tmpl, ok := c.Template(path)
	if !ok {
		if status == http.StatusNotFound || status == http.StatusMethodNotAllowed {
			return c.validate("#/components/schemas/Error", body)
		}
		return fmt.Errorf("path %s is not in openapi.yaml", path)
	}
	paths := c.doc["paths"].(map[string]any)
	op, _ := paths[tmpl].(map[string]any)[strings.ToLower(method)].(map[string]any)
	if op == nil {
		if status == http.StatusMethodNotAllowed || status == http.StatusNotFound {
			return c.validate("#/components/schemas/Error", body)
		}
		return fmt.Errorf("%s %s is not in openapi.yaml", method, tmpl)
	}
	if status >= 400 {
		// Every error, documented per operation or not, is the envelope.
		if err := c.validate("#/components/schemas/Error", body); err != nil {
			return fmt.Errorf("%s %s -> %d: %w", method, tmpl, status, err)
		}
	}
	responses, _ := op["responses"].(map[string]any)
	code := strconv.Itoa(status)
	ptr := "#/paths/" + esc(tmpl) + "/" + strings.ToLower(method) + "/responses/"
	resp, ok := responses[code].(map[string]any)
	if ok {
		ptr += code
	} else if resp, ok = responses["default"].(map[string]any); ok && status >= 400 {
		ptr += "default"
	} else {
		return fmt.Errorf("%s %s: status %d is not documented in openapi.yaml", method, tmpl, status)
	}
	if ref, isRef := resp["$ref"].(string); isRef {
		ptr = ref
		resp = c.resolve(ref)
	}
	content, _ := resp["content"].(map[string]any)
	if content == nil {
		if len(strings.TrimSpace(string(body))) > 0 && status != http.StatusNoContent {
			return fmt.Errorf("%s %s -> %d: body present but none documented", method, tmpl, status)
		}
		return nil
	}
	if _, ok := content["application/json"]; !ok {
		return nil
	}
	// An operation may document other media types beside JSON (a CSV
	// export); a response in one of those is what the contract allows.
	if mt, _, err := mime.ParseMediaType(header.Get("Content-Type")); err == nil && mt != "application/json" {
		if _, ok := content[mt]; ok {
			return nil
		}
	}
	if ct := header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		return fmt.Errorf("%s %s -> %d: content-type %q, documented application/json", method, tmpl, status, ct)
	}
	if err := c.validate(ptr+"/content/application~1json/schema", body); err != nil {
		return fmt.Errorf("%s %s -> %d: %w", method, tmpl, status, err)
	}
	return nil
}

func (c *Contract) resolve(ref string) map[string]any {
	var cur any = c.doc
	for _, p := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
		p = strings.ReplaceAll(strings.ReplaceAll(p, "~1", "/"), "~0", "~")
		m, _ := cur.(map[string]any)
		cur = m[p]
	}
	m, _ := cur.(map[string]any)
	return m
}

func (c *Contract) validate(ptr string, body []byte) error {
	c.mu.Lock()
	s, ok := c.cache[ptr]
	if !ok {
		var err error
		s, err = c.compiler.Compile(docURL + ptr)
		if err != nil {
			c.mu.Unlock()
			return fmt.Errorf("compile %s: %w", ptr, err)
		}
		c.cache[ptr] = s
	}
	c.mu.Unlock()
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(string(body)))
	if err != nil {
		return fmt.Errorf("body is not JSON: %w (%q)", err, truncate(body))
	}
	if err := s.Validate(v); err != nil {
		return fmt.Errorf("body does not match %s: %v\nbody: %s", ptr, err, truncate(body))
	}
	return nil
}

func truncate(b []byte) string {
	if len(b) > 600 {
		return string(b[:600]) + "…"
	}
	return string(b)
}
