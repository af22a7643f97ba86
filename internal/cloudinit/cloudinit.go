// Package cloudinit checks the cloud-init user-data an app ships to
// bootstrap the machines of its allocations (a #cloud-config document):
// the shape of the modules cloud-init runs, the size providers accept, and
// that no credential travels in it. User-data is readable by anything on
// the machine that can reach its metadata service, so credentials reach a
// machine through the platform's access-credential APIs instead.
//
// It is not cloud-init's own schema: it knows the modules a bootstrap
// uses, checks them strictly, and names anything else so that a typo
// (runcmds:, write_file:) fails here rather than being skipped silently at
// boot.
package cloudinit

import (
	"bytes"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/agnivade/levenshtein"
	"gopkg.in/yaml.v3"

	"github.com/gpuaas/gpuaas/internal/manifest"
)

// MaxBytes is the most user-data a bootstrap may carry: the smallest
// limit among the clouds gpuaas allocations come from (16 KiB).
const MaxBytes = 16 << 10

// Header is the first line cloud-init needs to read the rest as a
// cloud-config.
const Header = "#cloud-config"

// modules are the top-level keys accepted, with what each holds.
var modules = map[string]func(c *checker, ptr string, n *yaml.Node){
	"package_update":             boolean,
	"package_upgrade":            boolean,
	"package_reboot_if_required": boolean,
	"packages":                   packages,
	"apt":                        mapping,
	"yum_repos":                  mapping,
	"write_files":                writeFiles,
	"runcmd":                     commands,
	"bootcmd":                    commands,
	"users":                      users,
	"groups":                     anyShape,
	"ssh_authorized_keys":        authorizedKeys,
	"disable_root":               boolean,
	"ssh_pwauth":                 sshPwauth,
	"hostname":                   str,
	"fqdn":                       str,
	"preserve_hostname":          boolean,
	"manage_etc_hosts":           anyShape,
	"timezone":                   str,
	"ntp":                        mapping,
	"mounts":                     list,
	"swap":                       mapping,
	"final_message":              str,
	"power_state":                mapping,
}

// secretKeys may hold a password or key wherever they appear.
var secretKeys = map[string]bool{
	"password": true, "passwd": true, "hashed_passwd": true, "plain_text_passwd": true,
	"chpasswd": true, "ssh_keys": true, "private_key": true,
}

// privateKeyPEM matches PEM private keys (PKCS#1, PKCS#8, SEC 1, OpenSSH)
// and armoured PGP secret keys (PRIVATE KEY BLOCK).
var privateKeyPEM = regexp.MustCompile(`-----BEGIN [A-Z ]*PRIVATE KEY( BLOCK)?-----`)

// Validate checks data and returns its problems, located by JSON pointer
// and line; none means it is a bootstrap gpuaas accepts.
func Validate(data []byte) []manifest.Problem {
	c := &checker{}
	if len(data) > MaxBytes {
		c.add("", 0, "user-data is %d bytes; the limit is %d (fetch large files at boot instead of embedding them)", len(data), MaxBytes)
		return c.problems
	}
	first, _, _ := bytes.Cut(data, []byte("\n"))
	switch first := strings.TrimRight(string(first), "\r "); {
	case first == Header:
	case strings.HasPrefix(first, "#!"):
		c.add("", 1, "this is a shell script, not a cloud-config; put its commands under runcmd: in a %s document", Header)
		return c.problems
	default:
		c.add("", 1, "the first line must be %q for cloud-init to read the document (found %q)", Header, first)
		return c.problems
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		c.add("", 0, "not YAML: %v", err)
		return c.problems
	}
	if len(doc.Content) == 0 {
		c.add("", 1, "the document is empty: nothing would run at boot")
		return c.problems
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		c.add("", root.Line, "a cloud-config is a mapping of module keys (packages:, write_files:, runcmd:, …)")
		return c.problems
	}
	c.secrets("", root)
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := deref(root.Content[i]), deref(root.Content[i+1])
		check, ok := modules[k.Value]
		if !ok {
			if !secretKeys[k.Value] { // already reported as a credential
				if s := suggest(k.Value); s != "" {
					c.add("/"+escape(k.Value), k.Line, "unknown key %q (did you mean %s?)", k.Value, s)
				} else {
					c.add("/"+escape(k.Value), k.Line, "unknown key %q; gpuaas accepts %s", k.Value, strings.Join(known(), ", "))
				}
			}
			continue
		}
		check(c, "/"+escape(k.Value), v)
	}
	// As an editor walks them.
	sort.SliceStable(c.problems, func(i, j int) bool { return c.problems[i].Line < c.problems[j].Line })
	return c.problems
}

type checker struct{ problems []manifest.Problem }

func (c *checker) add(ptr string, line int, format string, args ...any) {
	c.problems = append(c.problems, manifest.Problem{Pointer: ptr, Line: line, Message: fmt.Sprintf(format, args...)})
}

// secrets walks the whole document for credentials.
func (c *checker) secrets(ptr string, n *yaml.Node) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			// A key may be an alias of a scalar anchored elsewhere (*k: x);
			// cloud-init reads it as that scalar. A value that is an alias
			// was walked where its anchor is.
			k, v := deref(n.Content[i]), n.Content[i+1]
			p := ptr + "/" + escape(k.Value)
			if secretKeys[k.Value] {
				c.add(p, n.Content[i].Line, "%s would put a credential in user-data, which anything on the machine can read; deliver it with the access-credential APIs at boot", k.Value)
				continue
			}
			c.secrets(p, v)
		}
	case yaml.SequenceNode:
		for i, v := range n.Content {
			c.secrets(ptr+"/"+strconv.Itoa(i), v)
		}
	case yaml.ScalarNode:
		if privateKeyPEM.MatchString(n.Value) {
			c.add(ptr, n.Line, "a private key in user-data can be read by anything on the machine; deliver it with the access-credential APIs at boot")
		}
	}
}

func boolean(c *checker, ptr string, n *yaml.Node) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
		c.add(ptr, n.Line, "want true or false")
	}
}

func str(c *checker, ptr string, n *yaml.Node) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		c.add(ptr, n.Line, "want a string")
	}
}

func mapping(c *checker, ptr string, n *yaml.Node) {
	if n.Kind != yaml.MappingNode {
		c.add(ptr, n.Line, "want a mapping")
	}
}

func list(c *checker, ptr string, n *yaml.Node) {
	if n.Kind != yaml.SequenceNode {
		c.add(ptr, n.Line, "want a list")
	}
}

func anyShape(*checker, string, *yaml.Node) {}

// items checks that n is a list (want says of what) and calls each with
// every item and its pointer.
func items(c *checker, ptr string, n *yaml.Node, want string, each func(ip string, item *yaml.Node)) {
	if n.Kind != yaml.SequenceNode {
		c.add(ptr, n.Line, "%s", want)
		return
	}
	for i, item := range n.Content {
		each(ptr+"/"+strconv.Itoa(i), deref(item))
	}
}

func sshPwauth(c *checker, ptr string, n *yaml.Node) {
	boolean(c, ptr, n)
	// YAML reads True and TRUE as true too (and cloud-init's YAML 1.1 yes
	// and on).
	switch strings.ToLower(n.Value) {
	case "true", "yes", "on":
		c.add(ptr, n.Line, "password sign-in over SSH is off on gpuaas machines; use keys (ssh_authorized_keys, or the bootstrap access credential)")
	}
}

// packages are names, or [name, version] pairs.
func packages(c *checker, ptr string, n *yaml.Node) {
	items(c, ptr, n, "want a list of package names", func(ip string, p *yaml.Node) {
		switch {
		case p.Kind == yaml.ScalarNode && p.Value != "":
		case p.Kind == yaml.SequenceNode && len(p.Content) == 2:
		default:
			c.add(ip, p.Line, "want a package name, or [name, version]")
		}
	})
}

// commands are shell strings, or argv lists run without a shell.
func commands(c *checker, ptr string, n *yaml.Node) {
	items(c, ptr, n, "want a list of commands (each a string for the shell, or a list of arguments)", func(ip string, cmd *yaml.Node) {
		switch cmd.Kind {
		case yaml.ScalarNode:
			if strings.TrimSpace(cmd.Value) == "" {
				c.add(ip, cmd.Line, "an empty command")
			}
		case yaml.SequenceNode:
			if len(cmd.Content) == 0 {
				c.add(ip, cmd.Line, "an empty argument list")
			}
			for j, a := range cmd.Content {
				if deref(a).Kind != yaml.ScalarNode {
					c.add(ip+"/"+strconv.Itoa(j), a.Line, "an argument must be a string")
				}
			}
		default:
			c.add(ip, cmd.Line, "want a string or a list of arguments")
		}
	})
}

var (
	permissions = regexp.MustCompile(`^0?[0-7]{3,4}$`)
	encodings   = map[string]bool{"": true, "text/plain": true, "b64": true, "base64": true, "gz": true, "gzip": true, "gz+b64": true, "gzip+base64": true, "gz+base64": true, "gzip+b64": true}
	fileKeys    = map[string]bool{"path": true, "content": true, "source": true, "owner": true, "permissions": true, "encoding": true, "append": true, "defer": true}
)

func writeFiles(c *checker, ptr string, n *yaml.Node) {
	items(c, ptr, n, "want a list of files ({path, content, permissions, owner})", func(ip string, f *yaml.Node) {
		if f.Kind != yaml.MappingNode {
			c.add(ip, f.Line, "want a mapping {path, content, …}")
			return
		}
		var path *yaml.Node
		hasBody := false
		for j := 0; j+1 < len(f.Content); j += 2 {
			k, v := deref(f.Content[j]), deref(f.Content[j+1])
			kp := ip + "/" + escape(k.Value)
			switch k.Value {
			case "path":
				path = v
			case "content", "source":
				hasBody = true
			case "permissions":
				// Unquoted 0644 is the integer 420 to YAML; cloud-init wants
				// the octal string.
				if v.Tag != "!!str" || !permissions.MatchString(v.Value) {
					c.add(kp, v.Line, "permissions must be a quoted octal string such as '0644' (found %s)", v.Value)
				}
			case "encoding":
				if !encodings[v.Value] {
					c.add(kp, v.Line, "unknown encoding %q; use b64, gzip, gz+b64 or leave it out", v.Value)
				}
			case "append", "defer":
				boolean(c, kp, v)
			case "owner":
				str(c, kp, v)
			default:
				if !fileKeys[k.Value] && !secretKeys[k.Value] {
					c.add(kp, k.Line, "unknown file key %q; a file takes path, content, source, owner, permissions, encoding, append, defer", k.Value)
				}
			}
		}
		switch {
		case path == nil:
			c.add(ip, f.Line, "a file needs a path")
		case !strings.HasPrefix(path.Value, "/") || strings.Contains(path.Value, "/../") || strings.HasSuffix(path.Value, "/.."):
			c.add(ip+"/path", path.Line, "path %q must be absolute, without ..", path.Value)
		}
		if !hasBody {
			c.add(ip, f.Line, "a file needs content (or source)")
		}
	})
}

func users(c *checker, ptr string, n *yaml.Node) {
	items(c, ptr, n, "want a list of users (default, or {name, …})", func(ip string, u *yaml.Node) {
		switch {
		case u.Kind == yaml.ScalarNode && u.Value == "default":
		case u.Kind == yaml.MappingNode:
			named := false
			for j := 0; j+1 < len(u.Content); j += 2 {
				if deref(u.Content[j]).Value == "name" && deref(u.Content[j+1]).Value != "" {
					named = true
				}
			}
			if !named {
				c.add(ip, u.Line, "a user needs a name")
			}
		default:
			c.add(ip, u.Line, "want default or a mapping {name, groups, shell, ssh_authorized_keys, …}")
		}
	})
}

func authorizedKeys(c *checker, ptr string, n *yaml.Node) {
	items(c, ptr, n, "want a list of public keys", func(ip string, k *yaml.Node) {
		f := strings.Fields(k.Value)
		if k.Kind != yaml.ScalarNode || len(f) < 2 || !(strings.HasPrefix(f[0], "ssh-") || strings.HasPrefix(f[0], "ecdsa-") || strings.HasPrefix(f[0], "sk-")) {
			c.add(ip, k.Line, "not an OpenSSH public key line (TYPE BASE64 [comment])")
		}
	})
}

func known() []string {
	out := make([]string, 0, len(modules))
	for k := range modules {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// suggest names the known key closest to a misspelled one.
func suggest(key string) string {
	best, bestD := "", 3
	for _, k := range known() {
		if d := levenshtein.ComputeDistance(key, k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// deref returns the node an alias (*name) stands for, as cloud-init reads
// it; any other node as it is. Only the one node: the checks never expand
// aliases below it, so a document of nested aliases costs no more to check
// than to read.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

func escape(t string) string {
	return strings.ReplaceAll(strings.ReplaceAll(t, "~", "~0"), "/", "~1")
}
