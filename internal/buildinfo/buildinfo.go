// Package buildinfo says which gpuaas this is: the version, the commit and
// the build time, from -ldflags when a release sets them and otherwise from
// what the Go toolchain stamped into the binary.
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// Set by release builds:
//
//	go build -ldflags "-X github.com/gpuaas/gpuaas/internal/buildinfo.Version=v1.2.3 \
//	  -X github.com/gpuaas/gpuaas/internal/buildinfo.Commit=$(git rev-parse HEAD) \
//	  -X github.com/gpuaas/gpuaas/internal/buildinfo.Date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
var (
	Version string
	Commit  string
	Date    string
)

// Info describes a build.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	Modified  bool   `json:"modified"` // built from a work tree with uncommitted changes
	Date      string `json:"build_date"`
	GoVersion string `json:"go_version"`
}

// Read returns this binary's build information. Fields nothing recorded are
// "unknown" (a `go run` carries no VCS stamp).
func Read() Info {
	in := Info{Version: Version, Commit: Commit, Date: Date, GoVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if in.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			in.Version = bi.Main.Version // go install module@version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if in.Commit == "" {
					in.Commit = s.Value
				}
			case "vcs.time":
				if in.Date == "" {
					in.Date = s.Value
				}
			case "vcs.modified":
				in.Modified = s.Value == "true"
			}
		}
	}
	if in.Version == "" {
		in.Version = "devel"
		if len(in.Commit) >= 12 {
			in.Version += "+" + in.Commit[:12]
		}
	}
	for _, f := range []*string{&in.Commit, &in.Date} {
		if *f == "" {
			*f = "unknown"
		}
	}
	return in
}
