package manifest

import (
	"errors"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Parse decodes a manifest package written in YAML or JSON, validates it
// against the embedded package schema and the semantic rules, and returns
// the normalised package. filename only chooses the syntax (".json" forces
// JSON) and never touches the file system.
//
// When anything is wrong the package is nil and every problem found is
// returned, ordered by source line. The error is reserved for failures of
// the validator itself (a broken embedded schema), never for bad input.
func Parse(data []byte, filename string) (*Package, []Problem, error) {
	set, err := compiledSchemas()
	if err != nil {
		return nil, nil, err
	}
	doc, problems := decodeDocument(data, filename)
	if doc == nil {
		return nil, sortProblems(problems), nil
	}

	var schemaProblems []Problem
	if err := set.pkg.Validate(doc.root); err != nil {
		var verr *jsonschema.ValidationError
		if !errors.As(err, &verr) {
			return nil, nil, err
		}
		schemaProblems = validationProblems(verr, "", set)
	}
	problems = append(problems, schemaProblems...)

	pkg, normProblems := build(doc.root)
	if pkg == nil && len(problems) == 0 {
		problems = normProblems
	}
	if pkg != nil {
		semantic := append(normProblems, checkPackage(pkg)...)
		// A value the schema already rejected would otherwise be reported
		// twice in different words; keep the schema's report.
		for _, p := range semantic {
			if !coveredBy(p, schemaProblems) {
				problems = append(problems, p)
			}
		}
	}
	for i := range problems {
		if problems[i].Line == 0 {
			problems[i].Line = doc.line(problems[i].Pointer)
		}
	}
	if len(problems) > 0 {
		return nil, sortProblems(problems), nil
	}
	return pkg, nil, nil
}

// coveredBy reports whether a schema problem sits at p's pointer or inside it.
func coveredBy(p Problem, schemaProblems []Problem) bool {
	for _, s := range schemaProblems {
		if s.Pointer == p.Pointer || strings.HasPrefix(s.Pointer, p.Pointer+"/") {
			return true
		}
	}
	return false
}
