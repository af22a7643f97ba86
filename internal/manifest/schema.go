package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/gpuaas/gpuaas/api/schemas"
)

// PackageSchemaID is the $id of the app manifest package schema.
const PackageSchemaID = "https://schemas.gpuaas.example.com/app-manifest-package.v1.schema.json"

// schemaSet is the compiled package schema plus the raw schema documents,
// which are consulted for the x-hints keyword (see hintFor).
type schemaSet struct {
	pkg  *jsonschema.Schema
	docs map[string]any // by $id
}

// compiledSchemas compiles the embedded schema files once per process: they
// are immutable build inputs, so caching them is not shared mutable state.
var compiledSchemas = sync.OnceValues(func() (*schemaSet, error) {
	return compileEmbedded(schemas.FS)
})

func compileEmbedded(fsys fs.FS) (*schemaSet, error) {
	names, err := fs.Glob(fsys, "*.json")
	if err != nil {
		return nil, err
	}
	set := &schemaSet{docs: map[string]any{}}
	c := newCompiler()
	for _, name := range names {
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("schema %s: %w", name, err)
		}
		obj, _ := doc.(map[string]any)
		id, _ := obj["$id"].(string)
		if id == "" {
			return nil, fmt.Errorf("schema %s has no $id", name)
		}
		set.docs[id] = doc
		if err := c.AddResource(id, doc); err != nil {
			return nil, fmt.Errorf("schema %s: %w", name, err)
		}
	}
	set.pkg, err = c.Compile(PackageSchemaID)
	if err != nil {
		return nil, fmt.Errorf("compile package schema: %w", err)
	}
	return set, nil
}

// refuseLoader refuses every URL that is not already a registered resource
// or a bundled metaschema. Manifests come from outside; a $ref in one must
// never make the server read local files or fetch from the network.
type refuseLoader struct{}

func (refuseLoader) Load(u string) (any, error) {
	return nil, fmt.Errorf("external reference %q is not allowed; keep schemas self-contained ($defs)", u)
}

func newCompiler() *jsonschema.Compiler {
	c := jsonschema.NewCompiler()
	c.UseLoader(refuseLoader{})
	c.DefaultDraft(jsonschema.Draft2020)
	return c
}

// CompileSchema compiles a JSON Schema embedded in a manifest (placement,
// config or launch-parameter schema). External references are refused. The
// given formats are registered and asserted, which is how the catalog makes
// "format": "pep508" a real check at launch time.
func CompileSchema(raw json.RawMessage, formats ...*jsonschema.Format) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	c := newCompiler()
	for _, f := range formats {
		c.RegisterFormat(f)
	}
	if len(formats) > 0 {
		c.AssertFormat()
	}
	const loc = "urn:gpuaas:embedded-schema"
	if err := c.AddResource(loc, doc); err != nil {
		return nil, err
	}
	return c.Compile(loc)
}

// SchemaErrorProblems converts an error from validating an instance against
// a compiled schema into Problems whose pointers are prefixed with prefix;
// a missing required property is one Problem at that property's pointer.
// Lines are left 0: the caller knows whether the instance has a source.
func SchemaErrorProblems(err error, prefix string) []Problem {
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		return []Problem{{Pointer: prefix, Message: err.Error()}}
	}
	return validationProblems(verr, prefix, nil)
}

// compileErrorMessage shortens a schema compile error to what an author
// needs: the library's errors carry the internal resource URL.
func compileErrorMessage(err error) string {
	var sve *jsonschema.SchemaValidationError
	if errors.As(err, &sve) {
		var verr *jsonschema.ValidationError
		if errors.As(sve.Err, &verr) {
			ps := validationProblems(verr, "", nil)
			if len(ps) > 0 {
				where := ps[0].Pointer
				if where == "" {
					where = "(root)"
				}
				return fmt.Sprintf("not a valid JSON Schema: at %s: %s", where, ps[0].Message)
			}
		}
	}
	return "does not compile as a JSON Schema: " + strings.ReplaceAll(err.Error(), "urn:gpuaas:embedded-schema", "schema")
}

var printer = message.NewPrinter(language.English)

// validationProblems flattens the library's error tree into one Problem per
// failing leaf, located at the instance pointer the leaf names.
func validationProblems(verr *jsonschema.ValidationError, prefix string, set *schemaSet) []Problem {
	var out []Problem
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			switch e.ErrorKind.(type) {
			case *kind.AnyOf, *kind.OneOf:
				// Alternatives that all fail at the same place say the same
				// thing several ways; the first one is the most direct.
				if leaves := collectLeaves(e); allAt(leaves, e.InstanceLocation) {
					walk(leaves[0])
					return
				}
			}
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		out = append(out, leafProblems(e, prefix, set)...)
	}
	walk(verr)
	return out
}

func collectLeaves(e *jsonschema.ValidationError) []*jsonschema.ValidationError {
	if len(e.Causes) == 0 {
		return []*jsonschema.ValidationError{e}
	}
	var out []*jsonschema.ValidationError
	for _, c := range e.Causes {
		out = append(out, collectLeaves(c)...)
	}
	return out
}

func allAt(leaves []*jsonschema.ValidationError, loc []string) bool {
	for _, l := range leaves {
		if pointerJoin("", l.InstanceLocation...) != pointerJoin("", loc...) {
			return false
		}
	}
	return len(leaves) > 0
}

func leafProblems(e *jsonschema.ValidationError, prefix string, set *schemaSet) []Problem {
	ptr := pointerJoin(prefix, e.InstanceLocation...)
	keyword := ""
	if kp := e.ErrorKind.KeywordPath(); len(kp) > 0 {
		keyword = kp[0]
	} else if _, ok := e.ErrorKind.(*kind.Not); ok {
		keyword = "not"
	}
	hint := set.hintFor(e.SchemaURL, keyword)
	metaschema := strings.HasPrefix(e.SchemaURL, "https://json-schema.org/") || strings.HasPrefix(e.SchemaURL, "http://json-schema.org/")

	switch k := e.ErrorKind.(type) {
	case *kind.AdditionalProperties:
		// One problem per unknown property, located at the property itself
		// so an editor jumps to the line to delete.
		out := make([]Problem, 0, len(k.Properties))
		for _, p := range k.Properties {
			msg := fmt.Sprintf("unknown property %q", p)
			if hint != "" {
				msg += ": " + hint
			}
			out = append(out, Problem{Pointer: pointerJoin(ptr, p), Message: msg})
		}
		return out
	case *kind.Required:
		if set == nil {
			// An instance (launch values): one problem per missing
			// property, at the property, so a form shows it beside the
			// field to fill in. A manifest keeps one at the object, the
			// line an editor can jump to.
			out := make([]Problem, 0, len(k.Missing))
			for _, p := range k.Missing {
				out = append(out, Problem{Pointer: pointerJoin(ptr, p), Message: "is required"})
			}
			return out
		}
		msg := hint
		if msg == "" {
			msg = fmt.Sprintf("missing required property %s", quoteList(k.Missing))
		}
		return []Problem{{Pointer: ptr, Message: msg}}
	case *kind.Pattern:
		if hint != "" {
			return []Problem{{Pointer: ptr, Message: fmt.Sprintf("%s (got %q)", hint, truncate(k.Got, 120))}}
		}
	}
	msg := plainMessage(e.ErrorKind)
	if hint != "" {
		msg = hint
	}
	if metaschema {
		msg = "not a valid JSON Schema: " + msg
	}
	return []Problem{{Pointer: ptr, Message: msg}}
}

// plainMessage words the common keyword failures directly; the library's
// localised messages group digits ("1,024"), which reads wrong for ports.
func plainMessage(k jsonschema.ErrorKind) string {
	switch k := k.(type) {
	case *kind.Minimum:
		return fmt.Sprintf("must be at least %s (got %s)", k.Want.RatString(), k.Got.RatString())
	case *kind.Maximum:
		return fmt.Sprintf("must be at most %s (got %s)", k.Want.RatString(), k.Got.RatString())
	case *kind.ExclusiveMinimum:
		return fmt.Sprintf("must be greater than %s (got %s)", k.Want.RatString(), k.Got.RatString())
	case *kind.ExclusiveMaximum:
		return fmt.Sprintf("must be less than %s (got %s)", k.Want.RatString(), k.Got.RatString())
	case *kind.MinItems:
		return fmt.Sprintf("needs at least %d items (got %d)", k.Want, k.Got)
	case *kind.MaxItems:
		return fmt.Sprintf("allows at most %d items (got %d)", k.Want, k.Got)
	case *kind.MinLength:
		return fmt.Sprintf("must be at least %d characters long (got %d)", k.Want, k.Got)
	case *kind.MaxLength:
		return fmt.Sprintf("must be at most %d characters long (got %d)", k.Want, k.Got)
	case *kind.MinProperties:
		return fmt.Sprintf("needs at least %d properties (got %d)", k.Want, k.Got)
	case *kind.MaxProperties:
		return fmt.Sprintf("allows at most %d properties (got %d)", k.Want, k.Got)
	case *kind.FalseSchema:
		return "is not allowed here"
	}
	return k.LocalizedString(printer)
}

// hintFor returns the author-facing message the schema files attach to a
// keyword through the non-standard "x-hints" annotation, which 2020-12
// validators ignore. It keeps regular-expression noise out of messages.
func (s *schemaSet) hintFor(schemaURL, keyword string) string {
	if s == nil || keyword == "" {
		return ""
	}
	base, frag, _ := strings.Cut(schemaURL, "#")
	node, ok := s.docs[base]
	if !ok {
		return ""
	}
	if f, err := url.PathUnescape(frag); err == nil {
		frag = f
	}
	for _, tok := range strings.Split(strings.TrimPrefix(frag, "/"), "/") {
		if tok == "" {
			continue
		}
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch n := node.(type) {
		case map[string]any:
			node = n[tok]
		case []any:
			var i int
			if _, err := fmt.Sscanf(tok, "%d", &i); err != nil || i < 0 || i >= len(n) {
				return ""
			}
			node = n[i]
		default:
			return ""
		}
	}
	obj, _ := node.(map[string]any)
	hints, _ := obj["x-hints"].(map[string]any)
	h, _ := hints[keyword].(string)
	return h
}

func quoteList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
