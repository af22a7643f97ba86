// Package scaffold writes a new app from a template (`gpuaas init`): source
// that already does what the platform expects of a workload, its manifest,
// image build, README and CI workflow. Templates live in templates/NAME,
// over the files of templates/_shared that every template gets (the usage
// reporter, go.mod, ignore files, the release workflow; a template's own
// file of the same name wins, and its _skip lists shared files it does
// without). A file whose name ends in .tmpl is a text/template with [[ ]] delimiters
// (CI files are full of {{ }}), any other is copied as it is. Files named
// gitignore, dockerignore and github/… are written with a leading dot: a
// dot-file would not be embedded, and a .github tree would be read as this
// repository's own CI.
package scaffold

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/template"

	"github.com/gpuaas/gpuaas/internal/manifest"
)

//go:embed all:templates
var templates embed.FS

// ManifestFile is the manifest every template writes.
const ManifestFile = "gpuaas.yaml"

// Options say what to write.
type Options struct {
	Template    string // a name from Templates
	Slug        string // the app slug; the directory's name when empty
	DisplayName string // from the slug when empty
	Module      string // the Go module path; example.com/SLUG when empty
	// Force writes into a directory that already has files, replacing
	// those of the same name.
	Force bool
}

// Templates are the names Write accepts.
func Templates() []string {
	entries, _ := fs.ReadDir(templates, "templates")
	var names []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), "_") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names
}

// ErrNotEmpty is returned when dir has files and Force is off.
var ErrNotEmpty = errors.New("directory is not empty")

// Write renders the template into dir (created when missing) and returns the
// paths it wrote, relative to dir. Nothing is written when the options are
// wrong or the rendered manifest does not validate, so a bad slug leaves no
// half-made app behind.
func Write(dir string, o Options) ([]string, error) {
	if o.Template == "" {
		o.Template = "http"
	}
	if !slices.Contains(Templates(), o.Template) {
		return nil, fmt.Errorf("no template %q; there are: %s", o.Template, strings.Join(Templates(), ", "))
	}
	if o.Slug == "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return nil, err
		}
		o.Slug = strings.ToLower(filepath.Base(abs))
	}
	if o.DisplayName == "" {
		o.DisplayName = displayName(o.Slug)
	}
	if o.Module == "" {
		o.Module = "example.com/" + o.Slug
	}

	files, err := render(o)
	if err != nil {
		return nil, err
	}
	// The slug and display name are checked by the validator the server
	// uses, on the manifest about to be written.
	if _, problems, err := manifest.Parse(files[ManifestFile], ManifestFile); err != nil {
		return nil, err
	} else if len(problems) > 0 {
		var msgs []string
		ours := false // a problem outside the slug and name is the template's
		for _, p := range problems {
			msgs = append(msgs, p.Pointer+": "+p.Message)
			ours = ours || !strings.Contains(p.Pointer, "slug") && !strings.Contains(p.Pointer, "display_name")
		}
		if ours {
			return nil, fmt.Errorf("template %s writes a manifest that does not validate (a bug in gpuaas; please report it): %s", o.Template, strings.Join(msgs, "; "))
		}
		return nil, fmt.Errorf("slug %q or display name %q would not make a valid app: %s (choose another with --slug)", o.Slug, o.DisplayName, strings.Join(msgs, "; "))
	}

	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 && !o.Force {
		return nil, fmt.Errorf("%s: %w (%d entries); choose a new directory, or --force to write over files of the same name", dir, ErrNotEmpty, len(entries))
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	var written []string
	for name, data := range files {
		dst := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return written, err
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			return written, err
		}
		written = append(written, name)
	}
	sort.Strings(written)
	return written, nil
}

// Next is what to do after Write, for the template: the commands that try
// the app, one per line, to print after cd DIR.
func Next(template string) string {
	b, _ := templates.ReadFile(path.Join("templates", template, "_next.txt"))
	return string(b)
}

// render returns every file of the template, by output path.
func render(o Options) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, dir := range []string{sharedDir, o.Template} { // the template's own files last: they win
		if err := renderDir(path.Join("templates", dir), o, out); err != nil {
			return nil, err
		}
	}
	// _skip names shared files the template does without, one per line.
	skip, _ := templates.ReadFile(path.Join("templates", o.Template, "_skip"))
	for _, name := range strings.Fields(string(skip)) {
		delete(out, dotted(strings.TrimSuffix(name, ".tmpl")))
	}
	return out, nil
}

// sharedDir holds the files every template gets.
const sharedDir = "_shared"

func renderDir(root string, o Options, out map[string][]byte) error {
	return fs.WalkDir(templates, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := templates.ReadFile(p)
		if err != nil {
			return err
		}
		name := strings.TrimPrefix(p, root+"/")
		if strings.HasPrefix(name, "_") {
			return nil // about the template (_next.txt), not part of the app
		}
		if strings.HasSuffix(name, ".tmpl") {
			name = strings.TrimSuffix(name, ".tmpl")
			t, err := template.New(name).Delims("[[", "]]").Option("missingkey=error").Funcs(funcs).Parse(string(data))
			if err != nil {
				return fmt.Errorf("template %s: %w", p, err)
			}
			var buf bytes.Buffer
			if err := t.Execute(&buf, o); err != nil {
				return fmt.Errorf("template %s: %w", p, err)
			}
			data = buf.Bytes()
		}
		out[dotted(name)] = data
		return nil
	})
}

// funcs: json quotes a value for YAML and JSON files (a JSON string is a
// YAML string), so a display name with ": " stays one value.
var funcs = template.FuncMap{"json": func(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}}

// dotted restores the leading dot of names that cannot carry it in the
// embedded tree.
func dotted(name string) string {
	switch {
	case name == "gitignore", name == "dockerignore":
		return "." + name
	case strings.HasPrefix(name, "github/"):
		return "." + name
	}
	return name
}

func displayName(slug string) string {
	words := strings.FieldsFunc(slug, func(r rune) bool { return r == '-' || r == '_' })
	for i, w := range words {
		words[i] = strings.ToUpper(w[:1]) + w[1:]
	}
	return strings.Join(words, " ")
}
