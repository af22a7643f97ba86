// Package docker is the node agent's container driver: it pulls images by
// digest, runs, inspects, stops and removes gpuaas-labelled containers and
// proves teardown, all through the Docker Engine API (moby client, which
// negotiates down to Engine 20.10 / API 1.41).
package docker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/agent/driver"
	"github.com/moby/moby/api/types/registry"
	"github.com/moby/moby/client"
)

// Credentials are registry credentials for one pull.
type Credentials = driver.Credentials

// Unwrapper turns a node-bound wrapping token into registry credentials.
type Unwrapper = driver.Unwrapper

// Config configures a Driver.
type Config struct {
	NodeID      string
	HostAddress string // where ports are published; 127.0.0.1 when empty
	DataDir     string // platform-owned files and scratch dirs live under DataDir/instances
	Unwrap      Unwrapper
	Logger      *slog.Logger
}

// Driver runs gpuaas workloads on one Docker engine.
type Driver struct {
	C      *client.Client
	cfg    Config
	pulled pulled     // the images it pulled, for ImagePruner
	netMu  sync.Mutex // one creation of WorkloadNetwork at a time

	// afterEnginePull, set by tests only, runs once the engine holds a
	// pulled image, before Pull checks and returns it; an error ends Pull
	// there, as a killed agent would.
	afterEnginePull func(ref string) error
}

// New connects to the engine named by the environment (DOCKER_HOST or the
// default socket) with API version negotiation.
func New(cfg Config) (*Driver, error) {
	c, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, err
	}
	if cfg.HostAddress == "" {
		cfg.HostAddress = "127.0.0.1"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Driver{C: c, cfg: cfg}, nil
}

// Close releases the engine connection.
func (d *Driver) Close() error { return d.C.Close() }

// Ping reports whether the engine answers.
func (d *Driver) Ping(ctx context.Context) error {
	_, err := d.C.Ping(ctx, client.PingOptions{})
	return err
}

// Failure is a task failure with a deterministic reason code.
type Failure = driver.Failure

func fail(reason, format string, args ...any) *Failure { return driver.Fail(reason, format, args...) }

// AsFailure extracts a Failure from err (nil for nil); other errors are
// engine or internal failures.
func AsFailure(err error) *Failure { return driver.AsFailure(err) }

var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// Pull pulls p.Repository@p.Digest with the credentials its wrapping token
// unwraps to, and checks the engine holds exactly that digest.
func (d *Driver) Pull(ctx context.Context, p nodeapi.ImagePull) (string, error) {
	last := p.Repository[strings.LastIndex(p.Repository, "/")+1:]
	if p.Repository == "" || !digestRE.MatchString(p.Digest) || strings.ContainsAny(last, ":@") || strings.Contains(p.Repository, "@") {
		return "", fail(nodeapi.ReasonInvalidTask, "an image is pulled by repository and sha256 digest only")
	}
	ref := p.Repository + "@" + p.Digest
	if d.hasDigest(ctx, ref) {
		d.markPulled(ref, false, time.Now())
		return ref, nil
	}
	// Recorded before the engine pulls: see beginPull.
	d.beginPull(ref, time.Now())
	defer d.endPull(ref)
	opts := client.ImagePullOptions{}
	if p.WrappingToken != "" {
		if d.cfg.Unwrap == nil {
			return "", fail(nodeapi.ReasonCredentialRefused, "this agent cannot unwrap pull credentials")
		}
		cr, err := d.cfg.Unwrap(ctx, p.WrappingToken)
		if f := (*Failure)(nil); errors.As(err, &f) {
			// The unwrapper already knows why (a rate limit or an
			// unavailable control plane waited out is a failed pull, not
			// refused credentials); any other error is a refusal.
			return "", f
		}
		if err != nil {
			return "", fail(nodeapi.ReasonCredentialRefused, "unwrap pull credentials: %v", err)
		}
		server := cr.Registry
		if server == "" {
			server, _, _ = strings.Cut(p.Repository, "/")
		}
		b, _ := json.Marshal(registry.AuthConfig{Username: cr.Username, Password: cr.Password, ServerAddress: server})
		opts.RegistryAuth = base64.URLEncoding.EncodeToString(b)
	}
	resp, err := d.C.ImagePull(ctx, ref, opts)
	if err != nil {
		return "", classifyPull(err)
	}
	err = resp.Wait(ctx)
	resp.Close()
	if err != nil {
		return "", classifyPull(err)
	}
	if d.afterEnginePull != nil {
		if err := d.afterEnginePull(ref); err != nil {
			return "", err
		}
	}
	if !d.hasDigest(ctx, ref) {
		return "", fail(nodeapi.ReasonDigestMismatch, "the engine pulled %s but holds no image with that repo digest", ref)
	}
	d.markPulled(ref, true, time.Now()) // the grace counts from the end of the pull
	return ref, nil
}

func classifyPull(err error) error {
	msg := err.Error()
	low := strings.ToLower(msg)
	if strings.Contains(low, "unauthorized") || strings.Contains(low, "denied") || strings.Contains(low, "authentication required") {
		return fail(nodeapi.ReasonCredentialRefused, "registry refused the pull: %s", msg)
	}
	if strings.Contains(low, "manifest verification failed") || strings.Contains(low, "digest did not match") {
		return fail(nodeapi.ReasonDigestMismatch, "%s", msg)
	}
	return fail(nodeapi.ReasonImagePullFailed, "%s", msg)
}

func (d *Driver) hasDigest(ctx context.Context, ref string) bool {
	img, err := d.C.ImageInspect(ctx, ref)
	if err != nil {
		return false
	}
	for _, rd := range img.RepoDigests {
		if rd == ref {
			return true
		}
	}
	return false
}

// RunningDigests returns the repo digests (sha256:…) of the images the
// containers ids were created from, as the engine records them: what the
// node really runs, not what the task asked for.
func (d *Driver) RunningDigests(ctx context.Context, ids []string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	for _, id := range ids {
		c, err := d.C.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		if err != nil {
			return nil, fail(nodeapi.ReasonInternal, "inspect container %s: %v", id, err)
		}
		img, err := d.C.ImageInspect(ctx, c.Container.Image)
		if err != nil {
			return nil, fail(nodeapi.ReasonInternal, "inspect image of %s: %v", id, err)
		}
		for _, rd := range img.RepoDigests {
			if _, dg, ok := strings.Cut(rd, "@"); ok && !seen[dg] {
				seen[dg] = true
				out = append(out, dg)
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// LogTail returns the last n lines a container wrote (stdout and stderr).
func (d *Driver) LogTail(ctx context.Context, id string, n int) []string {
	rc, err := d.C.ContainerLogs(ctx, id, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Tail: fmt.Sprint(n)})
	if err != nil {
		return nil
	}
	defer rc.Close()
	raw, _ := io.ReadAll(io.LimitReader(rc, 1<<20))
	return demuxLines(raw, n)
}

// demuxLines strips the engine's 8-byte stream headers (non-TTY logs) and
// returns the last n lines.
func demuxLines(raw []byte, n int) []string {
	var buf bytes.Buffer
	for len(raw) >= 8 && (raw[0] == 1 || raw[0] == 2) && raw[1] == 0 {
		size := int(raw[4])<<24 | int(raw[5])<<16 | int(raw[6])<<8 | int(raw[7])
		raw = raw[8:]
		if size > len(raw) {
			size = len(raw)
		}
		buf.Write(raw[:size])
		raw = raw[size:]
	}
	buf.Write(raw)
	var lines []string
	sc := bufio.NewScanner(&buf)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines
}

// instanceDir is where an instance's platform-owned files and scratch dirs live.
func (d *Driver) instanceDir(instanceID string) string {
	return filepath.Join(d.cfg.DataDir, "instances", instanceID)
}

// RemoveInstanceDir removes an instance's scratch path.
func (d *Driver) RemoveInstanceDir(instanceID string) error {
	if instanceID == "" || strings.ContainsAny(instanceID, "/\\") || instanceID == "." || instanceID == ".." {
		return nil
	}
	return os.RemoveAll(d.instanceDir(instanceID))
}

// Managed is the label filter every listing uses: the agent never sees, so
// never touches, a container without the gpuaas ownership label.
func (d *Driver) Managed(extra ...string) client.Filters {
	f := client.Filters{}.Add("label", nodeapi.LabelManaged+"=true")
	for _, e := range extra {
		f = f.Add("label", e)
	}
	return f
}

// Workloads lists every gpuaas-labelled container of this engine, each
// with the time it last started (the list does not carry it: one inspect
// per container, a local call).
func (d *Driver) Workloads(ctx context.Context) ([]nodeapi.Workload, error) {
	res, err := d.C.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: d.Managed()})
	if err != nil {
		return nil, err
	}
	out := make([]nodeapi.Workload, 0, len(res.Items))
	for _, c := range res.Items {
		name := ""
		if len(c.Names) > 0 {
			name = strings.TrimPrefix(c.Names[0], "/")
		}
		w := nodeapi.Workload{
			InstanceID: c.Labels[nodeapi.LabelInstance], TaskID: c.Labels[nodeapi.LabelTask], ContainerID: c.ID, Name: name,
			ComposeProject: c.Labels["com.docker.compose.project"], State: string(c.State),
		}
		if ins, err := d.C.ContainerInspect(ctx, c.ID, client.ContainerInspectOptions{}); err == nil && ins.Container.State != nil {
			w.StartedAt = startedAt(ins.Container.State.StartedAt)
		}
		out = append(out, w)
	}
	return out, nil
}

// SetNodeID names the node whose label this driver writes and reconciles.
func (d *Driver) SetNodeID(id string) { d.cfg.NodeID = id }
