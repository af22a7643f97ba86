package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Limits on what a manifest may be. A manifest is a small hand-written
// document; anything bigger or deeper is a mistake or an attack on the parser.
const (
	maxManifestBytes = 1 << 20
	maxDepth         = 64
)

// document is a decoded manifest: a JSON-compatible value tree (maps,
// slices, strings, json.Number, bools, nil) plus the source line of every
// JSON pointer in it, so that problems found later can name a line.
type document struct {
	root  any
	lines map[string]int
}

// line returns the source line of ptr, or of its nearest ancestor that has
// one: a missing property is reported on the line of the object that lacks it.
func (d *document) line(ptr string) int {
	for {
		if l, ok := d.lines[ptr]; ok {
			return l
		}
		i := strings.LastIndexByte(ptr, '/')
		if i < 0 {
			return 0
		}
		ptr = ptr[:i]
	}
}

// decodeDocument turns YAML or JSON bytes into a document. JSON is decoded
// by encoding/json rather than as YAML so that JSON-only files get JSON's
// exact number and escape rules; the YAML path handles everything else.
// A nil document means nothing usable could be read.
func decodeDocument(data []byte, filename string) (*document, []Problem) {
	if len(data) > maxManifestBytes {
		return nil, []Problem{{Message: fmt.Sprintf("manifest is %d bytes; the limit is %d", len(data), maxManifestBytes)}}
	}
	trimmed := bytes.TrimLeft(data, " \t\r\n\ufeff")
	if len(trimmed) == 0 {
		return nil, []Problem{{Line: 1, Message: "manifest is empty"}}
	}
	looksJSON := trimmed[0] == '{' || trimmed[0] == '['
	if strings.HasSuffix(strings.ToLower(filename), ".json") || looksJSON {
		doc, problems := decodeJSON(data)
		// A flow-style YAML file can start with '{'; only insist on JSON when
		// the file says it is JSON.
		if doc != nil || strings.HasSuffix(strings.ToLower(filename), ".json") {
			return doc, problems
		}
	}
	return decodeYAML(data)
}

// lineIndex maps byte offsets to 1-based line numbers.
type lineIndex []int // offsets of '\n'

func newLineIndex(data []byte) lineIndex {
	var idx lineIndex
	for i, b := range data {
		if b == '\n' {
			idx = append(idx, i)
		}
	}
	return idx
}

func (l lineIndex) at(offset int64) int {
	return sort.Search(len(l), func(i int) bool { return int64(l[i]) >= offset }) + 1
}

type jsonDecoder struct {
	dec      *json.Decoder
	idx      lineIndex
	lines    map[string]int
	problems []Problem
	unusable bool // a value was recorded as a problem and must not reach the validator
}

func decodeJSON(data []byte) (*document, []Problem) {
	d := &jsonDecoder{
		dec:   json.NewDecoder(bytes.NewReader(data)),
		idx:   newLineIndex(data),
		lines: map[string]int{},
	}
	d.dec.UseNumber()
	root, err := d.value("", 0)
	if err == nil {
		if _, extra := d.dec.Token(); extra != io.EOF {
			err = errors.New("unexpected content after the JSON document")
		}
	}
	if err != nil {
		line := d.idx.at(d.dec.InputOffset())
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			line = d.idx.at(syn.Offset)
		}
		msg := err.Error()
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			msg = "the JSON document ends early"
		}
		return nil, append(d.problems, Problem{Line: line, Message: "invalid JSON: " + msg})
	}
	if d.unusable {
		return nil, d.problems
	}
	return &document{root: root, lines: d.lines}, d.problems
}

func (d *jsonDecoder) value(ptr string, depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("nesting deeper than %d levels", maxDepth)
	}
	tok, err := d.dec.Token()
	if err != nil {
		return nil, err
	}
	if _, seen := d.lines[ptr]; !seen {
		d.lines[ptr] = d.idx.at(d.dec.InputOffset())
	}
	if num, isNum := tok.(json.Number); isNum {
		n, err := jsonNumber(string(num))
		if err != nil {
			d.problems = append(d.problems, Problem{Pointer: ptr, Line: d.lines[ptr], Message: err.Error()})
			d.unusable = true
		}
		return n, nil
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return tok, nil // string, bool or nil
	}
	switch delim {
	case '{':
		obj := map[string]any{}
		for d.dec.More() {
			kt, err := d.dec.Token()
			if err != nil {
				return nil, err
			}
			key, _ := kt.(string)
			kptr := pointerJoin(ptr, key)
			kline := d.idx.at(d.dec.InputOffset())
			if _, dup := obj[key]; dup {
				// encoding/json would silently keep the last value; two
				// readers of the same file must never disagree on it.
				d.problems = append(d.problems, Problem{Pointer: kptr, Line: kline, Message: fmt.Sprintf("duplicate key %q", key)})
			} else {
				d.lines[kptr] = kline
			}
			v, err := d.value(kptr, depth+1)
			if err != nil {
				return nil, err
			}
			obj[key] = v
		}
		_, err := d.dec.Token() // '}'
		return obj, err
	case '[':
		arr := []any{}
		for d.dec.More() {
			v, err := d.value(pointerIndex(ptr, len(arr)), depth+1)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		_, err := d.dec.Token() // ']'
		return arr, err
	}
	return nil, fmt.Errorf("unexpected %q", delim)
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): `)

type yamlDecoder struct {
	lines    map[string]int
	problems []Problem
}

func decodeYAML(data []byte) (doc *document, problems []Problem) {
	// yaml.v3 has panicked on hostile input in the past; a manifest
	// validator must answer with a problem, not crash the server.
	defer func() {
		if r := recover(); r != nil {
			doc, problems = nil, []Problem{{Message: fmt.Sprintf("could not parse YAML: %v", r)}}
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var n yaml.Node
	if err := dec.Decode(&n); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, []Problem{{Line: 1, Message: "manifest is empty"}}
		}
		return nil, []Problem{yamlErrorProblem(err)}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		p := Problem{Line: extra.Line, Message: "a manifest is a single YAML document; remove the '---' separated documents after the first"}
		if err != nil {
			p = yamlErrorProblem(err)
		}
		return nil, []Problem{p}
	}
	d := &yamlDecoder{lines: map[string]int{}}
	root := &n
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	v, ok := d.node(root, "", 0)
	if !ok {
		return nil, d.problems
	}
	return &document{root: v, lines: d.lines}, d.problems
}

func yamlErrorProblem(err error) Problem {
	msg := err.Error()
	p := Problem{Message: "invalid YAML: " + strings.TrimPrefix(msg, "yaml: ")}
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		p.Line, _ = strconv.Atoi(m[1])
		p.Message = "invalid YAML: " + msg[len(m[0]):]
	}
	return p
}

// node converts one YAML node. ok=false means the tree cannot be used at all
// (the problem has been recorded).
func (d *yamlDecoder) node(n *yaml.Node, ptr string, depth int) (any, bool) {
	if _, seen := d.lines[ptr]; !seen {
		d.lines[ptr] = n.Line
	}
	fail := func(msg string) (any, bool) {
		d.problems = append(d.problems, Problem{Pointer: ptr, Line: n.Line, Message: msg})
		return nil, false
	}
	if depth > maxDepth {
		return fail(fmt.Sprintf("nesting deeper than %d levels", maxDepth))
	}
	switch n.Kind {
	case yaml.AliasNode:
		// Aliases let one line stand for a large subtree; reviewers approve
		// what they can read, so the manifest must spell every value out.
		return fail("YAML aliases are not accepted; write the value out in full")
	case yaml.MappingNode:
		obj := make(map[string]any, len(n.Content)/2)
		ok := true
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!null" || k.ShortTag() == "!!merge" {
				d.problems = append(d.problems, Problem{Pointer: ptr, Line: k.Line, Message: "mapping keys must be plain strings (merge keys and complex keys are not accepted)"})
				ok = false
				continue
			}
			kptr := pointerJoin(ptr, k.Value)
			if _, dup := obj[k.Value]; dup {
				d.problems = append(d.problems, Problem{Pointer: kptr, Line: k.Line, Message: fmt.Sprintf("duplicate key %q", k.Value)})
			} else {
				d.lines[kptr] = k.Line
			}
			val, vok := d.node(v, kptr, depth+1)
			ok = ok && vok
			obj[k.Value] = val
		}
		return obj, ok
	case yaml.SequenceNode:
		arr := make([]any, 0, len(n.Content))
		ok := true
		for i, c := range n.Content {
			val, vok := d.node(c, pointerIndex(ptr, i), depth+1)
			ok = ok && vok
			arr = append(arr, val)
		}
		return arr, ok
	case yaml.ScalarNode:
		return d.scalar(n, fail)
	case yaml.DocumentNode:
		return fail("unexpected nested YAML document")
	}
	return fail("unsupported YAML node")
}

func (d *yamlDecoder) scalar(n *yaml.Node, fail func(string) (any, bool)) (any, bool) {
	switch n.ShortTag() {
	case "!!null":
		return nil, true
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			return fail(err.Error())
		}
		return b, true
	case "!!int":
		var i int64
		if err := n.Decode(&i); err == nil {
			return json.Number(strconv.FormatInt(i, 10)), true
		}
		var u uint64
		if err := n.Decode(&u); err == nil {
			return json.Number(strconv.FormatUint(u, 10)), true
		}
		return fail(fmt.Sprintf("integer %s is out of range", n.Value))
	case "!!float":
		var f float64
		if err := n.Decode(&f); err != nil {
			return fail(err.Error())
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return fail(fmt.Sprintf("%s has no JSON representation", n.Value))
		}
		num, err := jsonNumber(strconv.FormatFloat(f, 'g', -1, 64))
		if err != nil {
			return fail(err.Error())
		}
		return num, true
	case "!!str", "!!timestamp", "!!binary":
		return n.Value, true
	}
	return fail(fmt.Sprintf("YAML tag %s is not accepted", n.ShortTag()))
}
