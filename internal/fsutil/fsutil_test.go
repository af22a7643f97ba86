package fsutil

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// leftovers lists the directory's entries other than want.
func leftovers(t *testing.T, dir string, want ...string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
outer:
	for _, e := range ents {
		for _, w := range want {
			if e.Name() == w {
				continue outer
			}
		}
		out = append(out, e.Name())
	}
	return out
}

// WriteFile never writes into the file in place: a reader holding the old
// file (here a hard link to it) still sees the old content whole, and the
// name shows the new content whole, with the mode asked for.
func TestWriteFileReplacesByRename(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "state.json")
	if err := WriteFile(p, []byte("old content"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(dir, "old.link")
	if err := os.Link(p, old); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(p, []byte("new"), 0o640); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(old); string(b) != "old content" {
		t.Fatalf("the old file was written in place: %q", b)
	}
	b, err := os.ReadFile(p)
	if err != nil || string(b) != "new" {
		t.Fatalf("new content %q %v", b, err)
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v, want 0640", st.Mode().Perm())
	}
	if l := leftovers(t, dir, "state.json", "old.link"); len(l) != 0 {
		t.Fatalf("left behind %v", l)
	}
}

// At the moment the new file is committed under the name it is whole and
// synced, closed, and in the same directory; when the commit fails the old
// file stays and the temporary file goes.
func TestWriteCommitsAWholeTempFileAndCleansUpOnError(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "node.json")
	if err := os.WriteFile(p, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	refused := errors.New("refused")
	var seen string
	err := write(p, []byte("the new content"), 0o600, func(tmp, path string) error {
		seen = tmp
		if filepath.Dir(tmp) != dir || path != p {
			t.Errorf("commit %s -> %s: the temporary file is not beside the target", tmp, path)
		}
		if b, _ := os.ReadFile(tmp); string(b) != "the new content" {
			t.Errorf("the temporary file holds %q at commit", b)
		}
		return refused
	})
	if !errors.Is(err, refused) {
		t.Fatalf("err = %v", err)
	}
	if _, err := os.Stat(seen); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the temporary file %s was left behind (%v)", seen, err)
	}
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Fatalf("the old file changed: %q", b)
	}
}

// A rename that fails (a directory holds the name) leaves nothing behind.
func TestWriteFileErrorLeavesNoTempFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "pulled-images.json")
	if err := os.MkdirAll(filepath.Join(p, "busy"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(p, []byte("[]"), 0o600); err == nil {
		t.Fatal("replacing a non-empty directory succeeded")
	}
	if l := leftovers(t, dir, "pulled-images.json"); len(l) != 0 {
		t.Fatalf("left behind %v", l)
	}
	if err := WriteFile(filepath.Join(dir, "missing", "x"), []byte("x"), 0o600); err == nil {
		t.Fatal("wrote into a missing directory")
	}
}

// CreateFile never replaces: the second writer gets fs.ErrExist, the first
// writer's content stays, and no temporary file is left either way.
func TestCreateFileKeepsTheFirst(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "master.key")
	if err := CreateFile(p, []byte("first"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := CreateFile(p, []byte("second"), 0o600); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("second create: %v, want fs.ErrExist", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "first" {
		t.Fatalf("content %q", b)
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode().Perm())
	}
	if l := leftovers(t, dir, "master.key"); len(l) != 0 {
		t.Fatalf("left behind %v", l)
	}
}
