package manifest

import (
	"fmt"
	"io"
	"os"
)

// RunValidate validates the manifest file at path offline and writes one
// line per problem as FILE:LINE: POINTER: message (the form editors and CI
// annotators jump to), or a summary with each version's digest when the
// manifest is valid. ok reports validity; err is for I/O and internal
// failures only.
func RunValidate(w io.Writer, path string) (ok bool, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	pkg, problems, err := Parse(data, path)
	if err != nil {
		return false, err
	}
	if len(problems) > 0 {
		return false, WriteProblems(w, path, problems)
	}
	for _, v := range pkg.Versions {
		d, err := v.Digest()
		if err != nil {
			return false, err
		}
		if _, err := fmt.Fprintf(w, "%s: ok: %s %s (%s) %s\n", path, pkg.App.Slug, v.Version, v.RuntimeBackend, d); err != nil {
			return false, err
		}
	}
	return true, nil
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
