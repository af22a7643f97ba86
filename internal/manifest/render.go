package manifest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// A Setting replaces one value of a manifest before it is validated or
// registered (`--set KEY=VALUE`), so that a CI job can fill in the version
// it built and the digest it pushed without editing the file. The file in
// the repository stays a valid manifest on its own.
//
// KEY is a dotted path into the document (`version.runtime_profile.args.0`,
// `app.display_name`) or one of two short names that find the field in
// either manifest form, as long as the package has one version:
//
//	version        the version string
//	image_ref      the launchable OCI image of the runtime profile
//	artifact.NAME  REPOSITORY@DIGEST of the artifact named NAME: both its
//	               repository and digest (what `gpuaas artifact push -o json`
//	               prints), for versions that list artifacts
type Setting struct {
	Key, Value string
}

// ParseSetting reads KEY=VALUE.
func ParseSetting(s string) (Setting, error) {
	k, v, ok := strings.Cut(s, "=")
	k = strings.TrimSpace(k)
	if !ok || k == "" {
		return Setting{}, fmt.Errorf("--set %q: want KEY=VALUE, e.g. version=1.2.0 or image_ref=REGISTRY/REPO@sha256:…", s)
	}
	return Setting{Key: k, Value: v}, nil
}

// Render applies sets to a manifest file's bytes and returns the new bytes in
// the same syntax: YAML keeps its comments and key order; JSON stays JSON.
// Render does not validate: Parse the result for that, so the problems name
// the rendered document.
func Render(data []byte, filename string, sets []Setting) ([]byte, error) {
	if len(data) > maxManifestBytes {
		return nil, fmt.Errorf("manifest is %d bytes; the limit is %d", len(data), maxManifestBytes)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("cannot read the manifest: %v", err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("the manifest is not a mapping of fields, so there is nothing to set")
	}
	root := doc.Content[0]
	for _, s := range sets {
		if name, ok := strings.CutPrefix(s.Key, "artifact."); ok {
			if err := setArtifact(root, name, s.Value); err != nil {
				return nil, fmt.Errorf("--set %s: %w", s.Key, err)
			}
			continue
		}
		path, asString, err := resolveKey(root, s.Key)
		if err != nil {
			return nil, fmt.Errorf("--set %s: %w", s.Key, err)
		}
		if err := setPath(root, path, s.Value, asString); err != nil {
			return nil, fmt.Errorf("--set %s: %w", s.Key, err)
		}
	}
	trimmed := bytes.TrimLeft(data, " \t\r\n\ufeff")
	if strings.HasSuffix(strings.ToLower(filename), ".json") || (len(trimmed) > 0 && trimmed[0] == '{' && json.Valid(data)) {
		var compact bytes.Buffer
		if err := writeJSON(&compact, root); err != nil {
			return nil, err
		}
		var out bytes.Buffer
		if err := json.Indent(&out, compact.Bytes(), "", "  "); err != nil {
			return nil, err
		}
		out.WriteByte('\n')
		return out.Bytes(), nil
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// setArtifact points the artifact named name at ref (REPOSITORY@DIGEST).
func setArtifact(root *yaml.Node, name, ref string) error {
	repo, digest, ok := strings.Cut(ref, "@")
	if !ok || repo == "" || !strings.HasPrefix(digest, "sha256:") {
		return fmt.Errorf("want REPOSITORY@sha256:…, the repository and digest gpuaas artifact push prints, not %q", ref)
	}
	base, err := versionBase(root, "artifact."+name)
	if err != nil {
		return err
	}
	list := lookup(root, append(base, "artifacts"))
	if list == nil || list.Kind != yaml.SequenceNode {
		return fmt.Errorf("the version lists no artifacts (a launchable_oci version names its image with image_ref)")
	}
	var names []string
	for i, a := range list.Content {
		n := mapValue(a, "name")
		if n == nil {
			continue
		}
		if n.Value == name {
			at := append(base, "artifacts", strconv.Itoa(i))
			if err := setPath(root, append(at, "repository"), repo, true); err != nil {
				return err
			}
			return setPath(root, append(at, "digest"), digest, true)
		}
		names = append(names, n.Value)
	}
	return fmt.Errorf("no artifact named %q; the version's artifacts are: %s", name, strings.Join(names, ", "))
}

// versionBase is the path of the one version of the package: the root of a
// flat manifest, version or versions.0 of a nested one.
func versionBase(root *yaml.Node, key string) ([]string, error) {
	if mapValue(root, "app") == nil {
		return nil, nil
	}
	switch vs := mapValue(root, "versions"); {
	case vs != nil && vs.Kind == yaml.SequenceNode && len(vs.Content) == 1:
		return []string{"versions", "0"}, nil
	case vs != nil:
		return nil, fmt.Errorf("the package lists several versions; name one, e.g. versions.0.%s=…", key)
	default:
		return []string{"version"}, nil
	}
}

// resolveKey turns KEY into path segments. The short names must find their
// field; a dotted path may name a field that is not there yet. asString
// says the value is text whatever it looks like ("1.10" is a version, not a
// number).
func resolveKey(root *yaml.Node, key string) (path []string, asString bool, err error) {
	switch key {
	case "version", "image_ref":
		base, err := versionBase(root, strings.Replace(key, "image_ref", "runtime_profile.image_ref", 1))
		if err != nil {
			return nil, false, err
		}
		if key == "version" {
			path = append(base, "version")
		} else {
			path = append(base, "runtime_profile", "image_ref")
			if lookup(root, path) == nil {
				return nil, false, fmt.Errorf("the manifest has no %s to replace (only a launchable_oci runtime profile names its image)", strings.Join(path, "."))
			}
		}
		return path, true, nil
	}
	for _, seg := range strings.Split(key, ".") {
		if seg == "" {
			return nil, false, fmt.Errorf("empty field name in the path; write it as a.b.c")
		}
		path = append(path, seg)
	}
	return path, false, nil
}

// mapValue is the value under key in mapping n, or nil.
func mapValue(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

func lookup(n *yaml.Node, path []string) *yaml.Node {
	for _, seg := range path {
		switch n.Kind {
		case yaml.MappingNode:
			n = mapValue(n, seg)
		case yaml.SequenceNode:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(n.Content) {
				return nil
			}
			n = n.Content[i]
		default:
			return nil
		}
		if n == nil {
			return nil
		}
	}
	return n
}

// setPath writes value at path, creating missing fields of mappings. The new
// value keeps the old one's kind when that was a string; otherwise it is
// read as YAML, so gpu_count.default=1 is a number and ports=[…] a list.
func setPath(n *yaml.Node, path []string, value string, asString bool) error {
	for i, seg := range path {
		where := strings.Join(path[:i], ".")
		if where == "" {
			where = "the top level"
		}
		last := i == len(path)-1
		var slot **yaml.Node
		switch n.Kind {
		case yaml.MappingNode:
			for j := 0; j+1 < len(n.Content); j += 2 {
				if n.Content[j].Value == seg {
					slot = &n.Content[j+1]
					break
				}
			}
			if slot == nil {
				n.Content = append(n.Content,
					&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: seg},
					&yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"})
				slot = &n.Content[len(n.Content)-1]
			}
		case yaml.SequenceNode:
			j, err := strconv.Atoi(seg)
			if err != nil || j < 0 || j >= len(n.Content) {
				return fmt.Errorf("%s is a list of %d; %q is not an index in it", where, len(n.Content), seg)
			}
			slot = &n.Content[j]
		default:
			return fmt.Errorf("%s is a single value, not a mapping or list, so it has no field %q", where, seg)
		}
		if !last {
			n = *slot
			continue
		}
		old := *slot
		if asString || (old.Kind == yaml.ScalarNode && old.Tag == "!!str") {
			*slot = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: value, Style: old.Style &^ (yaml.LiteralStyle | yaml.FoldedStyle),
				LineComment: old.LineComment, HeadComment: old.HeadComment, FootComment: old.FootComment}
			return nil
		}
		var parsed yaml.Node
		if err := yaml.Unmarshal([]byte(value), &parsed); err != nil || len(parsed.Content) != 1 {
			*slot = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: value, LineComment: old.LineComment}
			return nil
		}
		v := parsed.Content[0]
		v.HeadComment, v.LineComment, v.FootComment = old.HeadComment, old.LineComment, old.FootComment
		*slot = v
	}
	return nil
}

// writeJSON writes n as JSON in the document's own key order (a map would
// sort the keys and turn a reviewed diff into noise).
func writeJSON(w *bytes.Buffer, n *yaml.Node) error {
	switch n.Kind {
	case yaml.MappingNode:
		w.WriteByte('{')
		for i := 0; i+1 < len(n.Content); i += 2 {
			if i > 0 {
				w.WriteByte(',')
			}
			k, _ := json.Marshal(n.Content[i].Value)
			w.Write(k)
			w.WriteByte(':')
			if err := writeJSON(w, n.Content[i+1]); err != nil {
				return err
			}
		}
		w.WriteByte('}')
	case yaml.SequenceNode:
		w.WriteByte('[')
		for i, c := range n.Content {
			if i > 0 {
				w.WriteByte(',')
			}
			if err := writeJSON(w, c); err != nil {
				return err
			}
		}
		w.WriteByte(']')
	case yaml.AliasNode:
		// Parse refuses aliases; expanding one here instead would turn a few
		// bytes into gigabytes (nested aliases) or recurse until the stack
		// overflows (an alias inside its own anchor).
		return fmt.Errorf("line %d: YAML aliases are not accepted; write the value out in full", n.Line)
	default:
		var v any
		if err := n.Decode(&v); err != nil {
			return err
		}
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		w.Write(b)
	}
	return nil
}
