package console

import (
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/manifest"
)

// The launch wizard: a form generated from a version's launch schemas
// (config_schema, the runtime profile's parameters, resource bounds). The
// server decides everything: the form only collects values, sends them to
// launch preview or create, and shows the effective values or each field's
// error next to that field (errors carry JSON pointers, fields know theirs).

// field is one input of the wizard.
type field struct {
	Name        string // form name; also the JSON pointer without the leading slash, "/" as "."
	Pointer     string // JSON pointer into the launch request
	Label       string
	Description string
	Kind        string // string, enum, integer, number, boolean, array
	Options     []string
	Value       string
	Checked     bool
	Min, Max    string
	Required    bool
	Error       string
	// enum is an enum field's values as the schema has them: the option
	// chosen is sent as its value (the number 2, not the text "2").
	enum []any
}

// schemaDoc is the part of a JSON Schema the wizard renders.
type schemaDoc struct {
	Type        any                  `json:"type"`
	Title       string               `json:"title"`
	Description string               `json:"description"`
	Properties  map[string]schemaDoc `json:"properties"`
	Required    []string             `json:"required"`
	Enum        []any                `json:"enum"`
	Default     any                  `json:"default"`
	Minimum     *float64             `json:"minimum"`
	Maximum     *float64             `json:"maximum"`
	MinLength   *int                 `json:"minLength"`
	MaxLength   *int                 `json:"maxLength"`
	Items       *schemaDoc           `json:"items"`
}

func (s schemaDoc) typeName() string {
	switch t := s.Type.(type) {
	case string:
		return t
	case []any:
		for _, v := range t {
			if n, ok := v.(string); ok && n != "null" {
				return n
			}
		}
	}
	return "string"
}

// wizardFields lists the inputs of a version's launch.
func wizardFields(mv manifest.Version) []field {
	var out []field
	if p := mv.RuntimeProfile; p != nil && p.Resources != nil {
		for _, r := range []struct {
			name, label string
			b           *manifest.Bounds
		}{{"gpu_count", "GPUs", p.Resources.GPUCount}, {"cpu_cores", "CPU cores", p.Resources.CPUCores}, {"memory_gib", "Memory (GiB)", p.Resources.MemoryGiB}} {
			if r.b == nil {
				continue
			}
			f := field{Name: "resources." + r.name, Pointer: "/resources/" + r.name, Label: r.label, Kind: "integer"}
			if r.b.Default != nil {
				f.Value = strconv.Itoa(*r.b.Default)
			}
			if r.b.Min != nil {
				f.Min = strconv.Itoa(*r.b.Min)
			}
			if r.b.Max != nil {
				f.Max = strconv.Itoa(*r.b.Max)
			}
			f.Description = boundsText(f.Min, f.Max)
			out = append(out, f)
		}
	}
	out = append(out, schemaFields("config", mv.ConfigSchema)...)
	if mv.RuntimeProfile != nil {
		out = append(out, schemaFields("parameters", mv.RuntimeProfile.Parameters)...)
	}
	return out
}

func boundsText(lo, hi string) string {
	switch {
	case lo != "" && hi != "":
		return fmt.Sprintf("from %s to %s", lo, hi)
	case lo != "":
		return "at least " + lo
	case hi != "":
		return "at most " + hi
	}
	return ""
}

// schemaFields renders the top-level properties of an object schema.
func schemaFields(doc string, raw json.RawMessage) []field {
	if len(raw) == 0 {
		return nil
	}
	var s schemaDoc
	if json.Unmarshal(raw, &s) != nil || len(s.Properties) == 0 {
		return nil
	}
	names := make([]string, 0, len(s.Properties))
	for n := range s.Properties {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []field
	for _, n := range names {
		p := s.Properties[n]
		f := field{Name: doc + "." + n, Pointer: "/" + doc + "/" + pointerToken(n), Label: n, Description: p.Description, Kind: p.typeName()}
		if p.Title != "" {
			f.Label = p.Title
		}
		for _, r := range s.Required {
			f.Required = f.Required || r == n
		}
		if len(p.Enum) > 0 {
			f.Kind, f.enum = "enum", p.Enum
			for _, e := range p.Enum {
				f.Options = append(f.Options, fmt.Sprint(e))
			}
		}
		if p.Minimum != nil {
			f.Min = strconv.FormatFloat(*p.Minimum, 'f', -1, 64)
		}
		if p.Maximum != nil {
			f.Max = strconv.FormatFloat(*p.Maximum, 'f', -1, 64)
		}
		if f.Description == "" {
			f.Description = boundsText(f.Min, f.Max)
		}
		switch d := p.Default.(type) {
		case nil:
		case bool:
			f.Checked = d
		case []any:
			parts := make([]string, len(d))
			for i, v := range d {
				parts[i] = fmt.Sprint(v)
			}
			f.Value = strings.Join(parts, ", ")
		default:
			f.Value = fmt.Sprint(d)
		}
		if f.Kind == "array" && p.Items != nil {
			f.Description = strings.TrimSpace(f.Description + " (comma-separated " + p.Items.typeName() + " values)")
		}
		out = append(out, f)
	}
	return out
}

// fill puts a submitted form's values into the fields.
func fill(fields []field, form url.Values) {
	for i := range fields {
		f := &fields[i]
		if f.Kind == "boolean" {
			f.Checked = form.Get(f.Name) != ""
			continue
		}
		f.Value = form.Get(f.Name)
		if v := strings.TrimSpace(f.Value); strings.HasPrefix(f.Name, "resources.") && v != "" {
			if _, err := strconv.Atoi(v); err != nil {
				// The request carries resources as integers, so this text
				// goes as -1 and the server's error would name -1, which
				// the person never typed: say what is wrong with what they did.
				f.Error = fmt.Sprintf("must be a whole number (got %q)", v)
			}
		}
	}
}

// launchValue turns one field's text into the JSON value sent. Text that
// does not parse as the field's type is sent as text, so the server's
// schema check names the problem (one source of truth for messages).
func launchValue(f field, itemType string) (any, bool) {
	v := strings.TrimSpace(f.Value)
	switch f.Kind {
	case "boolean":
		return f.Checked, true
	case "enum":
		if f.Value == "" {
			return nil, false
		}
		for _, e := range f.enum {
			if fmt.Sprint(e) == f.Value {
				return e, true
			}
		}
		return f.Value, true // not an option: the server says so
	case "array":
		if v == "" {
			return nil, false
		}
		var items []any
		for _, part := range strings.Split(v, ",") {
			if part = strings.TrimSpace(part); part != "" {
				items = append(items, scalar(part, itemType))
			}
		}
		return items, true
	}
	if v == "" {
		return nil, false
	}
	return scalar(v, f.Kind), true
}

func scalar(v, kind string) any {
	switch kind {
	case "integer":
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return n
		}
	case "number":
		if n, err := strconv.ParseFloat(v, 64); err == nil {
			return n
		}
	case "boolean":
		if b, err := strconv.ParseBool(v); err == nil {
			return b
		}
	}
	return v
}

// launchRequest builds the launch request from the filled fields.
func launchRequest(mv manifest.Version, fields []field) (client.LaunchRequest, error) {
	docs := map[string]map[string]any{}
	res := &client.LaunchResource{}
	items := itemTypes(mv)
	for _, f := range fields {
		doc, name, _ := strings.Cut(f.Name, ".")
		v, ok := launchValue(f, items[f.Name])
		if !ok {
			continue
		}
		if doc == "resources" {
			n, isInt := v.(int64)
			if !isInt {
				// Not a whole number: let the server say so for this field.
				n = -1
			}
			i := int(n)
			switch name {
			case "gpu_count":
				res.GPUCount = &i
			case "cpu_cores":
				res.CPUCores = &i
			case "memory_gib":
				res.MemoryGiB = &i
			}
			continue
		}
		if docs[doc] == nil {
			docs[doc] = map[string]any{}
		}
		docs[doc][name] = v
	}
	out := client.LaunchRequest{}
	if res.GPUCount != nil || res.CPUCores != nil || res.MemoryGiB != nil {
		out.Resources = res
	}
	var err error
	if d := docs["config"]; d != nil {
		if out.Config, err = json.Marshal(d); err != nil {
			return out, err
		}
	}
	if d := docs["parameters"]; d != nil {
		if out.Parameters, err = json.Marshal(d); err != nil {
			return out, err
		}
	}
	return out, nil
}

// itemTypes maps array fields to their items' type.
func itemTypes(mv manifest.Version) map[string]string {
	out := map[string]string{}
	add := func(doc string, raw json.RawMessage) {
		var s schemaDoc
		if len(raw) == 0 || json.Unmarshal(raw, &s) != nil {
			return
		}
		for n, p := range s.Properties {
			if p.Items != nil {
				out[doc+"."+n] = p.Items.typeName()
			}
		}
	}
	add("config", mv.ConfigSchema)
	if mv.RuntimeProfile != nil {
		add("parameters", mv.RuntimeProfile.Parameters)
	}
	return out
}

// pointerToken escapes a property name as one JSON pointer token (RFC
// 6901), as the server's errors name it: "a/b" is "a~1b".
func pointerToken(name string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(name)
}

// markErrors puts each field error next to its field; the rest are
// returned for the top of the form.
func markErrors(fields []field, errs map[string]string) map[string]string {
	rest := map[string]string{}
	for ptr, msg := range errs {
		placed := false
		for i := range fields {
			if ptr == fields[i].Pointer || strings.HasPrefix(ptr, fields[i].Pointer+"/") {
				if fields[i].Error == "" { // one set by fill says it better
					fields[i].Error = msg
				}
				placed = true
				break
			}
		}
		if !placed {
			rest[ptr] = msg
		}
	}
	return rest
}
