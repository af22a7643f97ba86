package cloudinit_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuaas/gpuaas/internal/cloudinit"
)

func TestTheBootstrapTemplateValidates(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "examples", "cloud-init", "bootstrap.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if p := cloudinit.Validate(data); len(p) > 0 {
		t.Fatalf("examples/cloud-init/bootstrap.yaml: %v", p)
	}
}

func TestValidateNamesWhatIsWrong(t *testing.T) {
	const h = "#cloud-config\n"
	for _, c := range []struct {
		name, doc       string
		pointer, substr string
		line            int
	}{
		{"shell script", "#!/bin/sh\necho hi\n", "", "shell script, not a cloud-config", 1},
		{"no header", "packages: [jq]\n", "", `first line must be "#cloud-config"`, 1},
		{"empty", h, "", "empty", 1},
		{"list at the top", h + "- a\n", "", "mapping of module keys", 2},
		{"typo", h + "runcmds:\n  - ls\n", "/runcmds", "did you mean runcmd?", 2},
		{"unknown far from any", h + "zzzzzzzzz: 1\n", "/zzzzzzzzz", "gpuaas accepts apt, bootcmd", 2},
		{"unquoted permissions", h + "write_files:\n  - {path: /etc/x, content: x, permissions: 0644}\n", "/write_files/0/permissions", "quoted octal string", 3},
		{"relative path", h + "write_files:\n  - {path: etc/x, content: x}\n", "/write_files/0/path", "must be absolute", 3},
		{"dot-dot path", h + "write_files:\n  - {path: /etc/../root/x, content: x}\n", "/write_files/0/path", "without ..", 3},
		{"no content", h + "write_files:\n  - {path: /etc/x}\n", "/write_files/0", "needs content", 3},
		{"bad encoding", h + "write_files:\n  - {path: /etc/x, content: x, encoding: rot13}\n", "/write_files/0/encoding", "unknown encoding", 3},
		{"unknown file key", h + "write_files:\n  - {path: /etc/x, content: x, mode: '0644'}\n", "/write_files/0/mode", "unknown file key", 3},
		{"password", h + "users:\n  - name: bob\n    plain_text_passwd: hunter2\n", "/users/0/plain_text_passwd", "credential in user-data", 4},
		{"chpasswd", h + "chpasswd:\n  list: |\n    root:x\n", "/chpasswd", "credential in user-data", 2},
		{"private key in a file", h + "write_files:\n  - path: /root/.ssh/id_ed25519\n    content: |\n      -----BEGIN OPENSSH PRIVATE KEY-----\n      abc\n", "/write_files/0/content", "private key", 4},
		{"pgp secret key in apt", h + "apt:\n  sources:\n    x:\n      key: |\n        -----BEGIN PGP PRIVATE KEY BLOCK-----\n        abc\n", "/apt/sources/x/key", "private key", 5},
		{"ssh password auth", h + "ssh_pwauth: true\n", "/ssh_pwauth", "password sign-in", 2},
		{"ssh password auth, capitalised", h + "ssh_pwauth: True\n", "/ssh_pwauth", "password sign-in", 2},
		{"ssh password auth, upper case", h + "ssh_pwauth: TRUE\n", "/ssh_pwauth", "password sign-in", 2},
		{"password under an alias key", h + "hostname: &k plain_text_passwd\nusers:\n  - name: bob\n    *k : hunter2\n", "/users/0/plain_text_passwd", "credential in user-data", 5},
		{"not a public key", h + "ssh_authorized_keys: [hello]\n", "/ssh_authorized_keys/0", "OpenSSH public key", 2},
		{"empty command", h + "runcmd:\n  - ''\n", "/runcmd/0", "empty command", 3},
		{"nested argv", h + "runcmd:\n  - [ls, [a]]\n", "/runcmd/0/1", "argument must be a string", 3},
		{"user without name", h + "users:\n  - {groups: [sudo]}\n", "/users/0", "needs a name", 3},
		{"packages not a list", h + "packages: jq\n", "/packages", "list of package names", 2},
		{"not a bool", h + "package_update: yes please\n", "/package_update", "true or false", 2},
		{"too big", h + "final_message: " + strings.Repeat("x", cloudinit.MaxBytes) + "\n", "", "the limit is 16384", 0},
		{"not YAML", h + "a: [\n", "", "not YAML", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			ps := cloudinit.Validate([]byte(c.doc))
			for _, p := range ps {
				if p.Pointer == c.pointer && strings.Contains(p.Message, c.substr) && p.Line == c.line {
					return
				}
			}
			t.Errorf("want %s (line %d) %q among %+v", c.pointer, c.line, c.substr, ps)
		})
	}
}

// Anchors and aliases are YAML that cloud-init reads as what they stand
// for: a module or a list item given by an alias is checked as its anchor.
func TestValidateReadsAliases(t *testing.T) {
	doc := "#cloud-config\nruncmd: &cmds\n  - [ls, &dir /etc]\nbootcmd: *cmds\n" +
		"write_files:\n  - &f {path: /etc/x, content: x, permissions: '0644'}\n  - *f\n" +
		"users:\n  - &u {name: bob}\n  - *u\n"
	if p := cloudinit.Validate([]byte(doc)); len(p) > 0 {
		t.Fatalf("a valid document with aliases: %v", p)
	}
}

func FuzzValidate(f *testing.F) {
	data, err := os.ReadFile(filepath.Join("..", "..", "examples", "cloud-init", "bootstrap.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(data))
	f.Add("#cloud-config\nwrite_files:\n  - {path: /x, content: y, permissions: '0644'}\n")
	f.Add("#cloud-config\nusers: [default, {name: a, passwd: b}]\n")
	f.Fuzz(func(t *testing.T, doc string) {
		for _, p := range cloudinit.Validate([]byte(doc)) {
			if p.Message == "" || (p.Pointer != "" && p.Pointer[0] != '/') {
				t.Fatalf("problem without a message or with a bad pointer: %+v", p)
			}
		}
	})
}
