package catalog

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Pip package requirements arrive from launch forms and end up as arguments
// of a package install on a tenant's node. They are therefore parsed against
// the PEP 508 grammar (name, extras, PEP 440 version specifiers, environment
// markers) and refused if they use the parts of it that reach outside the
// package index: direct references ("name @ URL") and anything that is not
// part of the grammar, in particular shell metacharacters. The node agent
// must still pass them as argv, never through a shell; this parser is the
// second line of defence, not the only one.

// refusedChars are shell metacharacters (and the requirements-file comment
// sign) that PEP 508 either never needs or only allows inside marker
// strings, where no real marker uses them.
const refusedChars = "`$&|\\#{}^%?"

// maxRequirementLen bounds one requirement string; real ones are short.
const maxRequirementLen = 256

// Requirement is one parsed PEP 508 requirement that names a package from an
// index.
type Requirement struct {
	Name       string      // as written
	Extras     []string    // as written
	Specifiers []Specifier // comma-separated version clauses, all must hold
	Marker     string      // normalised environment marker, "" if none
}

// Specifier is one PEP 440 version clause, such as ">=1.26".
type Specifier struct {
	Op      string
	Version string
}

// String renders the requirement in a normalised spelling that
// ParseRequirement reads back to the same value.
func (r Requirement) String() string {
	var b strings.Builder
	b.WriteString(r.Name)
	if len(r.Extras) > 0 {
		b.WriteString("[" + strings.Join(r.Extras, ",") + "]")
	}
	for i, s := range r.Specifiers {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(s.Op + s.Version)
	}
	if r.Marker != "" {
		b.WriteString("; " + r.Marker)
	}
	return b.String()
}

// NormalizedName is the PEP 503 form of the name, under which two spellings
// of one project compare equal.
func (r Requirement) NormalizedName() string {
	return strings.ToLower(nameSeparatorRE.ReplaceAllString(r.Name, "-"))
}

var nameSeparatorRE = regexp.MustCompile(`[-_.]+`)

// ErrDirectReference is returned for "name @ url" requirements and URLs.
var ErrDirectReference = errors.New("direct references (name @ URL) and URLs are not accepted; name a package and version from the package index")

// ParseRequirement parses one PEP 508 requirement string.
func ParseRequirement(s string) (Requirement, error) {
	if len(s) > maxRequirementLen {
		return Requirement{}, fmt.Errorf("requirement is %d characters; the limit is %d", len(s), maxRequirementLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c < 0x20 && c != '\t', c >= 0x7f:
			return Requirement{}, fmt.Errorf("character %q at offset %d is not allowed", c, i)
		case strings.IndexByte(refusedChars, c) >= 0:
			return Requirement{}, fmt.Errorf("character %q at offset %d is not allowed (shell metacharacters and comments are refused)", c, i)
		case c == '@':
			return Requirement{}, ErrDirectReference
		}
	}
	if strings.Contains(s, "://") {
		return Requirement{}, ErrDirectReference
	}
	p := &reqParser{s: s}
	r, err := p.requirement()
	if err != nil {
		return Requirement{}, err
	}
	return r, nil
}

type reqParser struct {
	s   string
	pos int
}

func (p *reqParser) errorf(format string, args ...any) error {
	return fmt.Errorf("at offset %d: %s", p.pos, fmt.Sprintf(format, args...))
}

func (p *reqParser) skipWS() {
	for p.pos < len(p.s) && (p.s[p.pos] == ' ' || p.s[p.pos] == '\t') {
		p.pos++
	}
}

func (p *reqParser) peek() byte {
	if p.pos < len(p.s) {
		return p.s[p.pos]
	}
	return 0
}

func (p *reqParser) eat(tok string) bool {
	if strings.HasPrefix(p.s[p.pos:], tok) {
		p.pos += len(tok)
		return true
	}
	return false
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// identifier reads a PEP 508 identifier: letters and digits, with '-', '_'
// and '.' allowed only between them.
func (p *reqParser) identifier(what string) (string, error) {
	start := p.pos
	if !isAlnum(p.peek()) {
		return "", p.errorf("expected %s", what)
	}
	for p.pos < len(p.s) && (isAlnum(p.s[p.pos]) || strings.IndexByte("-_.", p.s[p.pos]) >= 0) {
		p.pos++
	}
	id := p.s[start:p.pos]
	if !isAlnum(id[len(id)-1]) {
		return "", p.errorf("%s %q must end with a letter or digit", what, id)
	}
	return id, nil
}

func (p *reqParser) requirement() (Requirement, error) {
	var r Requirement
	p.skipWS()
	name, err := p.identifier("package name")
	if err != nil {
		return r, err
	}
	r.Name = name
	p.skipWS()
	if p.eat("[") {
		if r.Extras, err = p.extras(); err != nil {
			return r, err
		}
		p.skipWS()
	}
	if p.eat("(") {
		if r.Specifiers, err = p.specifiers(); err != nil {
			return r, err
		}
		p.skipWS()
		if !p.eat(")") {
			return r, p.errorf("expected ')' after version specifiers")
		}
	} else if c := p.peek(); c == '<' || c == '>' || c == '=' || c == '!' || c == '~' {
		if r.Specifiers, err = p.specifiers(); err != nil {
			return r, err
		}
	}
	p.skipWS()
	if p.eat(";") {
		m, err := p.markerOr()
		if err != nil {
			return r, err
		}
		if m == "" {
			return r, p.errorf("expected an environment marker after ';'")
		}
		r.Marker = m
		p.skipWS()
	}
	if p.pos != len(p.s) {
		return r, p.errorf("unexpected %q", p.s[p.pos:])
	}
	return r, nil
}

func (p *reqParser) extras() ([]string, error) {
	var extras []string
	p.skipWS()
	if p.eat("]") {
		return nil, nil
	}
	for {
		p.skipWS()
		e, err := p.identifier("extra name")
		if err != nil {
			return nil, err
		}
		extras = append(extras, e)
		p.skipWS()
		if p.eat("]") {
			return extras, nil
		}
		if !p.eat(",") {
			return nil, p.errorf("expected ',' or ']' in extras")
		}
	}
}

var specOps = []string{"===", "~=", "==", "!=", "<=", ">=", "<", ">"}

func (p *reqParser) specifiers() ([]Specifier, error) {
	var specs []Specifier
	for {
		p.skipWS()
		op := ""
		for _, o := range specOps {
			if p.eat(o) {
				op = o
				break
			}
		}
		if op == "" {
			return nil, p.errorf("expected a version operator (one of %s)", strings.Join(specOps, " "))
		}
		p.skipWS()
		start := p.pos
		for p.pos < len(p.s) && (isAlnum(p.s[p.pos]) || strings.IndexByte("-_.*+!", p.s[p.pos]) >= 0) {
			p.pos++
		}
		v := p.s[start:p.pos]
		if v == "" {
			return nil, p.errorf("expected a version after %q", op)
		}
		if err := checkSpecifierVersion(op, v); err != nil {
			return nil, fmt.Errorf("at offset %d: %w", start, err)
		}
		specs = append(specs, Specifier{Op: op, Version: v})
		p.skipWS()
		if !p.eat(",") {
			return specs, nil
		}
	}
}

// PEP 440 versions in the permissive spelling pip accepts (the pattern of
// the reference implementation in the packaging library), split so that
// the operator rules below can inspect the release and local parts.
var (
	pep440RE = regexp.MustCompile(`(?i)^v?(?:[0-9]+!)?(?P<release>[0-9]+(?:\.[0-9]+)*)` +
		`(?:[-_.]?(?:alpha|a|beta|b|preview|pre|c|rc)[-_.]?[0-9]*)?` +
		`(?:-[0-9]+|[-_.]?(?:post|rev|r)[-_.]?[0-9]*)?` +
		`(?:[-_.]?dev[-_.]?[0-9]*)?` +
		`(?P<local>\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?$`)
	pep440PrefixRE    = regexp.MustCompile(`(?i)^v?(?:[0-9]+!)?[0-9]+(?:\.[0-9]+)*\.\*$`)
	arbitraryEqualsRE = regexp.MustCompile(`^[A-Za-z0-9._+!-]+$`)
)

// checkSpecifierVersion applies PEP 440's per-operator rules: prefix
// matching (".*") only with == and !=, local versions only with == and !=,
// and ~= needs at least two release segments.
func checkSpecifierVersion(op, v string) error {
	switch op {
	case "===":
		if !arbitraryEqualsRE.MatchString(v) {
			return fmt.Errorf("%q is not an acceptable version for ===", v)
		}
		return nil
	case "==", "!=":
		if strings.HasSuffix(v, ".*") {
			if !pep440PrefixRE.MatchString(v) {
				return fmt.Errorf("%q: a .* prefix match may only follow release numbers, as in 2.3.*", v)
			}
			return nil
		}
	}
	m := pep440RE.FindStringSubmatch(v)
	if m == nil {
		return fmt.Errorf("%q is not a PEP 440 version", v)
	}
	local := m[pep440RE.SubexpIndex("local")]
	switch op {
	case "==", "!=":
		return nil
	case "~=":
		if strings.Count(m[pep440RE.SubexpIndex("release")], ".") < 1 {
			return fmt.Errorf("~=%s needs at least two release numbers, as in ~=%s.0", v, v)
		}
	}
	if local != "" {
		return fmt.Errorf("%s%s: local versions (+%s) are only allowed with == and !=", op, v, local[1:])
	}
	return nil
}

// markerVariables are the environment marker variables of PEP 508.
var markerVariables = map[string]bool{
	"python_version": true, "python_full_version": true, "os_name": true,
	"sys_platform": true, "platform_release": true, "platform_system": true,
	"platform_version": true, "platform_machine": true,
	"platform_python_implementation": true, "implementation_name": true,
	"implementation_version": true, "extra": true,
}

// markerStringRE limits marker string literals to what real markers use
// (platform names, versions); quotes inside and shell syntax are excluded.
var markerStringRE = regexp.MustCompile(`^[A-Za-z0-9 ._+*,:=!~/()-]*$`)

var markerOps = []string{"===", "==", "!=", "<=", ">=", "~=", "<", ">"}

// markerOr parses marker_or and returns it normalised: single spaces,
// double-quoted strings, explicit parentheses kept.
func (p *reqParser) markerOr() (string, error) {
	left, err := p.markerAnd()
	if err != nil {
		return "", err
	}
	for p.keyword("or") {
		right, err := p.markerAnd()
		if err != nil {
			return "", err
		}
		left += " or " + right
	}
	return left, nil
}

func (p *reqParser) markerAnd() (string, error) {
	left, err := p.markerExpr()
	if err != nil {
		return "", err
	}
	for p.keyword("and") {
		right, err := p.markerExpr()
		if err != nil {
			return "", err
		}
		left += " and " + right
	}
	return left, nil
}

// keyword consumes a whole word (after optional whitespace) if it is kw.
func (p *reqParser) keyword(kw string) bool {
	save := p.pos
	p.skipWS()
	if p.eat(kw) {
		if c := p.peek(); !isAlnum(c) && c != '_' {
			return true
		}
	}
	p.pos = save
	return false
}

func (p *reqParser) markerExpr() (string, error) {
	p.skipWS()
	if p.eat("(") {
		inner, err := p.markerOr()
		if err != nil {
			return "", err
		}
		p.skipWS()
		if !p.eat(")") {
			return "", p.errorf("expected ')' in marker")
		}
		return "(" + inner + ")", nil
	}
	left, err := p.markerVar()
	if err != nil {
		return "", err
	}
	op, err := p.markerOp()
	if err != nil {
		return "", err
	}
	right, err := p.markerVar()
	if err != nil {
		return "", err
	}
	return left + " " + op + " " + right, nil
}

func (p *reqParser) markerOp() (string, error) {
	p.skipWS()
	for _, o := range markerOps {
		if p.eat(o) {
			return o, nil
		}
	}
	if p.keyword("in") {
		return "in", nil
	}
	if p.keyword("not") {
		if p.keyword("in") {
			return "not in", nil
		}
	}
	return "", p.errorf("expected a marker operator")
}

func (p *reqParser) markerVar() (string, error) {
	p.skipWS()
	switch q := p.peek(); q {
	case '"', '\'':
		p.pos++
		end := strings.IndexByte(p.s[p.pos:], q)
		if end < 0 {
			return "", p.errorf("unterminated string in marker")
		}
		lit := p.s[p.pos : p.pos+end]
		if !markerStringRE.MatchString(lit) {
			return "", p.errorf("marker string %q has characters outside letters, digits and version punctuation", lit)
		}
		p.pos += end + 1
		return `"` + lit + `"`, nil
	}
	start := p.pos
	for p.pos < len(p.s) && (isAlnum(p.s[p.pos]) || p.s[p.pos] == '_') {
		p.pos++
	}
	name := p.s[start:p.pos]
	if !markerVariables[name] {
		p.pos = start
		if name == "" {
			return "", p.errorf("expected a marker variable or quoted string")
		}
		return "", p.errorf("unknown marker variable %q", name)
	}
	return name, nil
}
