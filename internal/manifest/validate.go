package manifest

import (
	"fmt"
	"io"
	"os"
)

// Report is what validating one manifest file found: the problems, or
// each version with the digest the server will compute for it.
type Report struct {
	File     string          `json:"file"`
	Valid    bool            `json:"valid"`
	App      string          `json:"app,omitempty"`
	Versions []ReportVersion `json:"versions,omitempty"`
	Problems []Problem       `json:"problems,omitempty"`
}

// ReportVersion is one valid version of a package.
type ReportVersion struct {
	Version        string `json:"version"`
	RuntimeBackend string `json:"runtime_backend"`
	Digest         string `json:"digest"`
}

// ValidateFile validates the manifest file at path offline. err is for I/O
// and internal failures only; an invalid manifest is a Report with problems.
func ValidateFile(path string) (Report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Report{File: path}, err
	}
	return Validate(data, path)
}

// Validate is ValidateFile on bytes already read (and perhaps rendered);
// path names them in the report.
func Validate(data []byte, path string) (Report, error) {
	r := Report{File: path}
	pkg, problems, err := Parse(data, path)
	if err != nil {
		return r, err
	}
	if len(problems) > 0 {
		r.Problems = problems
		return r, nil
	}
	r.Valid, r.App = true, pkg.App.Slug
	for _, v := range pkg.Versions {
		d, err := v.Digest()
		if err != nil {
			return r, err
		}
		r.Versions = append(r.Versions, ReportVersion{Version: v.Version, RuntimeBackend: v.RuntimeBackend, Digest: d})
	}
	return r, nil
}

// WriteText writes the report as lines: one per problem as
// FILE:LINE: POINTER: message (the form editors and CI annotators jump to),
// or one per valid version with its digest.
func (r Report) WriteText(w io.Writer) error {
	if !r.Valid {
		return WriteProblems(w, r.File, r.Problems)
	}
	for _, v := range r.Versions {
		if _, err := fmt.Fprintf(w, "%s: ok: %s %s (%s) %s\n", r.File, r.App, v.Version, v.RuntimeBackend, v.Digest); err != nil {
			return err
		}
	}
	return nil
}

// RunValidate validates the manifest file at path and writes the report as
// text. ok reports validity; err is for I/O and internal failures only.
func RunValidate(w io.Writer, path string) (ok bool, err error) {
	r, err := ValidateFile(path)
	if err != nil {
		return false, err
	}
	return r.Valid, r.WriteText(w)
}

// WriteProblems writes one line per problem as FILE:LINE: POINTER: message.
func WriteProblems(w io.Writer, path string, problems []Problem) error {
	for _, p := range problems {
		if _, err := fmt.Fprintf(w, "%s:%s\n", path, p); err != nil {
			return err
		}
	}
	return nil
}
