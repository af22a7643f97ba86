package sealer

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestSealOpen(t *testing.T) {
	s, err := New(bytes.Repeat([]byte{3}, KeySize))
	if err != nil {
		t.Fatal(err)
	}
	secret := []byte("private key bytes")
	a, _ := s.Seal(secret, "kid-1")
	b, _ := s.Seal(secret, "kid-1")
	if a == b {
		t.Fatal("sealing is deterministic: nonces repeat")
	}
	if strings.Contains(a, string(secret)) {
		t.Fatal("sealed value shows the plaintext")
	}
	got, err := s.Open(a, "kid-1")
	if err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("open: %q %v", got, err)
	}
	// Bound to its purpose: the same value under another id does not open.
	if _, err := s.Open(a, "kid-2"); err == nil {
		t.Fatal("sealed value moved to another row opened")
	}
	// Tampering is detected.
	raw := []byte(a)
	raw[len(raw)-2] ^= 0x01
	if _, err := s.Open(string(raw), "kid-1"); err == nil {
		t.Fatal("tampered value opened")
	}
	// Another master key cannot open it.
	other, _ := New(bytes.Repeat([]byte{4}, KeySize))
	if _, err := other.Open(a, "kid-1"); err == nil {
		t.Fatal("value opened under another master key")
	}
	if _, err := New([]byte("short")); err == nil {
		t.Fatal("short master key accepted")
	}
}

func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "secret.key")
	if _, err := ReadKeyFile(path); err == nil {
		t.Fatal("a missing production key file must be an error")
	}
	k1, err := LoadOrCreateKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v", st.Mode().Perm())
	}
	k2, err := LoadOrCreateKeyFile(path)
	if err != nil || !bytes.Equal(k1, k2) {
		t.Fatal("the key file is not reused")
	}
	if k3, err := ReadKeyFile(path); err != nil || !bytes.Equal(k1, k3) {
		t.Fatal("ReadKeyFile disagrees")
	}
	if _, err := DecodeKey("bm90IDMyIGJ5dGVz"); err == nil {
		t.Fatal("a key of the wrong length was accepted")
	}
}

// Processes starting together (or a crash mid-write) must never hand out a
// key that is not the one on disk, nor read a half-written file.
func TestKeyFileCreatedOnceUnderRace(t *testing.T) {
	for range 20 {
		path := filepath.Join(t.TempDir(), "secret.key")
		keys := make([][]byte, 8)
		errs := make([]error, len(keys))
		var wg sync.WaitGroup
		for i := range keys {
			wg.Go(func() { keys[i], errs[i] = LoadOrCreateKeyFile(path) })
		}
		wg.Wait()
		onDisk, err := ReadKeyFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i := range keys {
			if errs[i] != nil {
				t.Fatalf("caller %d: %v", i, errs[i])
			}
			if !bytes.Equal(keys[i], onDisk) {
				t.Fatalf("caller %d got a master key that is not the one on disk", i)
			}
		}
		if matches, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".secret.key.tmp-*")); len(matches) > 0 {
			t.Fatalf("temp files left: %v", matches)
		}
	}
}
