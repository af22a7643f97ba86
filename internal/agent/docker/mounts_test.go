package docker_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/agent/docker"
)

// An instance's platform file is written again by each of its deployments
// (an upgrade, a rollback, a retry), over the read-only file the last one
// left. Root opens that for writing regardless; an agent that is not root
// (gpuaas dev as a member of the docker group) must too. Run as root, the
// test runs itself again as nobody. No engine is needed: the files are
// written before anything reaches it.
func TestMountsRewriteAnInstanceFileAsNonRoot(t *testing.T) {
	if os.Getuid() == 0 && os.Getenv("GPUAAS_TEST_AS_NOBODY") == "" {
		asNobody(t, "TestMountsRewriteAnInstanceFileAsNonRoot")
		return
	}
	dir, err := os.MkdirTemp("", "gpuaas-mounts-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	d, err := docker.New(docker.Config{NodeID: "n", DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ms := []nodeapi.Mount{{Kind: "file", Target: "/var/run/gpuaas/identity.json", Content: []byte("key-1"), Mode: 0o440, ReadOnly: true}}
	first, err := d.Mounts("inst1", ms)
	if err != nil {
		t.Fatal(err)
	}
	ms[0].Content = []byte("key-2")
	second, err := d.Mounts("inst1", ms)
	if err != nil {
		t.Fatalf("the instance's next deployment cannot write its file: %v", err)
	}
	b, err := os.ReadFile(second[0].Source)
	if err != nil || string(b) != "key-2" || second[0].Source != first[0].Source {
		t.Fatalf("file %s: %q %v", second[0].Source, b, err)
	}
	if st, err := os.Stat(second[0].Source); err != nil || st.Mode().Perm()&0o222 != 0 {
		t.Fatalf("the rewritten file is writable: %v %v", st.Mode(), err)
	}
}

// asNobody runs the named test of this binary as uid/gid 65534 and fails
// t with its output when it fails.
func asNobody(t *testing.T, name string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The test binary (and maybe $TMPDIR) sits in a directory only root
	// enters: nobody runs a copy, under /tmp, with a temp dir of its own.
	dir, err := os.MkdirTemp("/tmp", "gpuaas-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	work := filepath.Join(dir, "tmp")
	if err := os.Mkdir(work, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(work, 0o777); err != nil { // whatever the umask
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "test")
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run", "^"+name+"$", "-test.count=1")
	cmd.Dir = dir
	cmd.Env = []string{"GPUAAS_TEST_AS_NOBODY=1", "TMPDIR=" + work, "HOME=" + work}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("as nobody: %v\n%s", err, out)
	}
}
