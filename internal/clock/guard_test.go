package clock_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// wallClockReads are the functions of package time that read the wall
// clock: server code that stamps or compares a time reads the server's one
// clock (a `Now func() time.Time` it was handed) instead.
var wallClockReads = []string{"Now", "Since", "Until"}

// wallClockAllowed are the server-side places that may read the wall
// clock, each with why: a directory (ending in "/") for a whole package
// that does not run in the server, "file:Func" (methods as Type.Method)
// for one function whose reading is never stamped or compared with a
// stamped time.
var wallClockAllowed = map[string]string{
	"internal/clock/":                  "the clock itself: the wall clock when none is handed in",
	"internal/agent/":                  "other host: the node agent runs on its node, with its own clock (agent.Config.Now)",
	"internal/cli/":                    "other host: the CLI runs on a user's machine",
	"internal/testbin/":                "test helper: waits for test binaries",
	"internal/servertest/":             "test helper: the wall clock for a server in another process",
	"internal/store/storetest/":        "test helper: waits for a test PostgreSQL",
	"internal/instances/instancetest/": "test helper: a fake workload's own timing",

	"internal/events/stream.go:sseFraming.arm":                             "deadline: a connection's write deadline",
	"internal/events/relay.go:Relay.publish":                               "latency: the process-local retry back-off, waited on with time.AfterFunc",
	"internal/httpapi/deadlines.go:ExtendDeadlines":                        "deadline: a connection's read and write deadlines",
	"internal/gateway/deadline.go:deadlineIn":                              "deadline: a browser connection's read or write deadline",
	"internal/httpapi/middleware.go:API.wrap":                              "latency: a request's duration for logs and metrics",
	"internal/ratelimit/ratelimit.go:Keyed.clock":                          "throttle: a process-local token bucket per key; a stopped test clock would never refill it",
	"internal/iam/keyring.go:Keyring.ReloadIfStale":                        "throttle: how often an unknown kid may reload the key set",
	"internal/iam/keyring.go:Keyring.Reload":                               "throttle: when the key set was last read (ReloadIfStale)",
	"internal/artifacts/registrykeys.go:RegistryKeyReloader.ReloadIfStale": "throttle: how often an unknown kid may reload the registry's key set",
	"internal/artifacts/registrykeys.go:RegistryKeyReloader.Reload":        "throttle: when the registry's key set was last read (ReloadIfStale)",
	"internal/nodes/tasks.go:Service.PollTasks":                            "deadline: how long a task poll waits",
	"internal/instances/external.go:Service.Acquire":                       "deadline: how long a worker's acquire waits",
	"internal/server/devnode.go:App.waitDevNode":                           "deadline: how long dev mode waits for its node",
	"internal/worker/worker.go:Periodic.loop":                              "latency and process-local backoff: a run's duration for the log, the wait after a panic",
	"internal/artifacts/registrysweep.go:Service.recountRegistries":        "deadline: whether what is left of a sweep's run holds one more project's recount",
}

// The server reads one clock (config.Config.Now, built once in
// internal/server): a read of the wall clock anywhere else on the server
// side is a time a test cannot move, and one that can disagree with the
// times the server stamps. This walks the non-test Go files of internal/
// and cmd/ and fails on any time.Now, time.Since or time.Until — a call or
// a function value — outside wallClockAllowed.
func TestServerReadsOneClock(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	var bad []string
	for _, top := range []string{"internal", "cmd"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel := filepath.ToSlash(strings.TrimPrefix(path, root+string(filepath.Separator)))
			if d.IsDir() {
				if _, ok := wallClockAllowed[rel+"/"]; ok {
					used[rel+"/"] = true
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
				return nil
			}
			for _, at := range wallClockReadsIn(t, path) {
				key := rel + ":" + at.fn
				if _, ok := wallClockAllowed[key]; ok {
					used[key] = true
					continue
				}
				bad = append(bad, rel+":"+strconv.Itoa(at.line)+" in "+at.fn+": time."+at.name)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range bad {
		t.Errorf("%s reads the wall clock: read the server's clock (a `Now func() time.Time` set from internal/server's `now`), "+
			"or, for a deadline, a duration or a process-local throttle never stamped, add it to wallClockAllowed with the reason", b)
	}
	for key := range wallClockAllowed {
		if !used[key] {
			t.Errorf("wallClockAllowed[%q] matches no wall-clock read any more: remove it", key)
		}
	}
}

type wallClockRead struct {
	fn, name string
	line     int
}

// wallClockReadsIn lists the reads of the wall clock in one file, each
// with the top-level function it is in ("" outside any).
func wallClockReadsIn(t *testing.T, path string) []wallClockRead {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	pkg := "" // the name package time goes by in this file
	for _, im := range f.Imports {
		if p, _ := strconv.Unquote(im.Path.Value); p == "time" {
			pkg = "time"
			if im.Name != nil {
				pkg = im.Name.Name
			}
		}
	}
	if pkg == "" || pkg == "_" {
		return nil
	}
	var out []wallClockRead
	for _, decl := range f.Decls {
		fn := funcName(decl)
		ast.Inspect(decl, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == pkg && slices.Contains(wallClockReads, sel.Sel.Name) {
				out = append(out, wallClockRead{fn: fn, name: sel.Sel.Name, line: fset.Position(sel.Pos()).Line})
			}
			return true
		})
	}
	return out
}

// funcName is Func or Type.Method for a function declaration, "" for
// anything else.
func funcName(decl ast.Decl) string {
	fd, ok := decl.(*ast.FuncDecl)
	if !ok {
		return ""
	}
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	typ := fd.Recv.List[0].Type
	for {
		switch x := typ.(type) {
		case *ast.StarExpr:
			typ = x.X
			continue
		case *ast.IndexExpr:
			typ = x.X
			continue
		case *ast.IndexListExpr:
			typ = x.X
			continue
		}
		break
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}
