package registry

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Registry actions a repository scope can ask for.
const (
	ActionPull   = "pull"
	ActionPush   = "push"
	ActionDelete = "delete"
	ActionAll    = "*"
)

// Limits on untrusted token-request input.
const (
	maxScopeLen    = 1024
	maxScopes      = 64
	maxActions     = 16
	maxResourceLen = 255
)

var (
	scopeTypeRe = regexp.MustCompile(`^([a-z0-9]+)(?:\(([a-z0-9]+)\))?$`)
	actionRe    = regexp.MustCompile(`^(?:[a-z][a-z0-9_-]*|\*)$`)
	// repositoryRe is the OCI distribution spec's <name> grammar: path
	// components only, no registry host.
	repositoryRe = regexp.MustCompile(`^[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*)*$`)
)

// Scope is one resource scope of the Docker token spec,
// "type[(class)]:name:action[,action...]", e.g. "repository:gpuaas/apps/p/a:push,pull".
// Granted scopes have the same shape (the token's "access" entries).
type Scope struct {
	Type    string   `json:"type"`
	Class   string   `json:"class,omitempty"`
	Name    string   `json:"name"`
	Actions []string `json:"actions"`
}

// String renders the scope in its wire form. Actions are as stored
// (ParseScope sorts and deduplicates them).
func (s Scope) String() string {
	t := s.Type
	if s.Class != "" {
		t += "(" + s.Class + ")"
	}
	return t + ":" + s.Name + ":" + strings.Join(s.Actions, ",")
}

// ParseScope parses one scope. The type is everything before the first ':'
// and the actions everything after the last ':', so names may contain ':'
// (for resource types other than "repository"). Repository names are checked against the
// OCI distribution spec's name grammar. Actions are deduplicated and sorted.
func ParseScope(raw string) (Scope, error) {
	if len(raw) > maxScopeLen {
		return Scope{}, invalidf("invalid_scope", "scope longer than %d bytes", maxScopeLen)
	}
	typ, rest, ok := strings.Cut(raw, ":")
	i := strings.LastIndexByte(rest, ':')
	if !ok || i < 0 {
		return Scope{}, invalidf("invalid_scope", "scope %q is not type:name:actions", raw)
	}
	name, actions := rest[:i], rest[i+1:]
	m := scopeTypeRe.FindStringSubmatch(typ)
	if m == nil {
		return Scope{}, invalidf("invalid_scope", "scope %q has an invalid resource type", raw)
	}
	s := Scope{Type: m[1], Class: m[2], Name: name}
	if err := checkResourceName(s.Type, name); err != nil {
		return Scope{}, invalidf("invalid_scope", "scope %q: %v", raw, err)
	}
	for a := range strings.SplitSeq(actions, ",") {
		if !actionRe.MatchString(a) {
			return Scope{}, invalidf("invalid_scope", "scope %q has an invalid action %q", raw, a)
		}
		if !slices.Contains(s.Actions, a) {
			if len(s.Actions) == maxActions {
				return Scope{}, invalidf("invalid_scope", "scope %q has more than %d actions", raw, maxActions)
			}
			s.Actions = append(s.Actions, a)
		}
	}
	slices.Sort(s.Actions)
	return s, nil
}

func checkResourceName(typ, name string) error {
	if name == "" || len(name) > maxResourceLen {
		return fmt.Errorf("resource name must be 1..%d bytes", maxResourceLen)
	}
	if typ == "repository" {
		return checkRepository(name)
	}
	for _, r := range name {
		if r <= ' ' || r == 0x7f || r > 0x7e {
			return fmt.Errorf("resource name has a control, space or non-ASCII character")
		}
	}
	return nil
}

// ValidRepository reports whether name is a valid repository name: the OCI
// distribution spec's grammar, no registry host, at most 255 bytes.
func ValidRepository(name string) bool { return checkRepository(name) == nil }

// checkRepository validates a repository name (OCI distribution spec).
func checkRepository(name string) error {
	if name == "" || len(name) > maxResourceLen || !repositoryRe.MatchString(name) {
		return fmt.Errorf("invalid repository name %q", name)
	}
	return nil
}

// ParseScopes parses the values of every "scope" parameter of a token
// request; each value may hold several space-separated scopes. Scopes on
// the same resource are merged. Empty values are ignored.
func ParseScopes(values []string) ([]Scope, error) {
	var out []Scope
	n := 0
	for _, v := range values {
		for _, raw := range strings.Fields(v) {
			if n++; n > maxScopes {
				return nil, invalidf("invalid_scope", "more than %d scopes", maxScopes)
			}
			s, err := ParseScope(raw)
			if err != nil {
				return nil, err
			}
			out = mergeScope(out, s)
		}
	}
	return out, nil
}

func mergeScope(scopes []Scope, s Scope) []Scope {
	for i := range scopes {
		if scopes[i].Type == s.Type && scopes[i].Class == s.Class && scopes[i].Name == s.Name {
			for _, a := range s.Actions {
				if !slices.Contains(scopes[i].Actions, a) {
					scopes[i].Actions = append(scopes[i].Actions, a)
				}
			}
			slices.Sort(scopes[i].Actions)
			return scopes
		}
	}
	return append(scopes, s)
}

// intersectActions returns the requested actions that allowed covers, in
// requested order. An allowed "*" covers every action.
func intersectActions(requested, allowed []string) []string {
	all := slices.Contains(allowed, ActionAll)
	var out []string
	for _, a := range requested {
		if (all || slices.Contains(allowed, a)) && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}
