package api

import (
	"regexp"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"gopkg.in/yaml.v3"
)

// TestOpenAPIIsValid runs the contract through a maintained OpenAPI 3.1
// validator, so a YAML slip (an unquoted comma in a flow mapping) or a
// schema error cannot reach SDK generators again.
func TestOpenAPIIsValid(t *testing.T) {
	doc, err := libopenapi.NewDocument(OpenAPI)
	if err != nil {
		t.Fatalf("parse openapi.yaml: %v", err)
	}
	if v := doc.GetVersion(); v != "3.1.0" {
		t.Fatalf("openapi version = %q, want 3.1.0", v)
	}
	if _, errs := doc.BuildV3Model(); errs != nil {
		t.Fatalf("build v3 model: %v", errs)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatalf("new validator: %v", errs)
	}
	ok, verrs := v.ValidateDocument()
	for _, e := range verrs {
		t.Errorf("openapi.yaml: %s: %s", e.Message, e.Reason)
		for _, se := range e.SchemaValidationErrors {
			t.Errorf("  %s (line %d): %s", se.KeywordLocation, se.Line, se.Reason)
		}
	}
	if !ok && len(verrs) == 0 {
		t.Fatal("openapi.yaml is invalid")
	}
}

var operationIDPattern = regexp.MustCompile(`^[a-z][A-Za-z0-9]*$`)

// TestEveryOperationHasOperationID walks every path and method: routes added
// later cannot forget their operationId, and ids stay unique.
func TestEveryOperationHasOperationID(t *testing.T) {
	var spec struct {
		Paths map[string]map[string]yaml.Node `yaml:"paths"`
	}
	if err := yaml.Unmarshal(OpenAPI, &spec); err != nil {
		t.Fatal(err)
	}
	methods := map[string]bool{"get": true, "put": true, "post": true, "delete": true, "patch": true, "head": true, "options": true, "trace": true}
	seen := map[string]string{}
	n := 0
	for path, item := range spec.Paths {
		for method, node := range item {
			if !methods[method] {
				continue
			}
			n++
			var op struct {
				OperationID string `yaml:"operationId"`
			}
			if err := node.Decode(&op); err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			where := method + " " + path
			switch {
			case op.OperationID == "":
				t.Errorf("%s has no operationId", where)
			case !operationIDPattern.MatchString(op.OperationID):
				t.Errorf("%s: operationId %q is not lowerCamelCase", where, op.OperationID)
			case seen[op.OperationID] != "":
				t.Errorf("%s: operationId %q already used by %s", where, op.OperationID, seen[op.OperationID])
			default:
				seen[op.OperationID] = where
			}
		}
	}
	if n == 0 {
		t.Fatal("no operations found")
	}
}
