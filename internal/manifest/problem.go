package manifest

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Problem is one thing wrong with a manifest, located both for programs
// (Pointer, an RFC 6901 JSON pointer into the submitted document; "" is the
// root) and for people (Line, 1-based line in the source file, 0 if unknown).
type Problem struct {
	Pointer string `json:"pointer"`
	Line    int    `json:"line,omitempty"`
	Message string `json:"message"`
}

func (p Problem) String() string {
	ptr := p.Pointer
	if ptr == "" {
		ptr = "(root)"
	}
	return fmt.Sprintf("%d: %s: %s", p.Line, ptr, p.Message)
}

// pointerJoin appends reference tokens to a JSON pointer, escaping '~' and '/'.
func pointerJoin(base string, tokens ...string) string {
	var b strings.Builder
	b.WriteString(base)
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(escapeToken(t))
	}
	return b.String()
}

func pointerIndex(base string, i int) string {
	return base + "/" + strconv.Itoa(i)
}

func escapeToken(t string) string {
	if !strings.ContainsAny(t, "~/") {
		return t
	}
	return strings.ReplaceAll(strings.ReplaceAll(t, "~", "~0"), "/", "~1")
}

// sortProblems orders problems as an editor would walk them (by line, then
// pointer) and drops exact duplicates, which arise when several schema
// branches reject the same value for the same reason.
func sortProblems(ps []Problem) []Problem {
	slices.SortStableFunc(ps, func(a, b Problem) int {
		// Unknown lines (0) go last so located problems come first.
		la, lb := a.Line, b.Line
		if la == 0 {
			la = int(^uint(0) >> 1)
		}
		if lb == 0 {
			lb = int(^uint(0) >> 1)
		}
		return cmp.Or(cmp.Compare(la, lb), cmp.Compare(a.Pointer, b.Pointer), cmp.Compare(a.Message, b.Message))
	})
	return slices.Compact(ps)
}
