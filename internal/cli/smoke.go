package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/client/nodeapi"
	agentdocker "github.com/gpuaas/gpuaas/internal/agent/docker"
	"github.com/gpuaas/gpuaas/internal/catalog"
	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/manifest"
	"github.com/gpuaas/gpuaas/internal/scaffold"
	"github.com/gpuaas/gpuaas/internal/server"

	"github.com/moby/moby/api/types/container"
	docker "github.com/moby/moby/client"
)

// SmokeFile declares an app's smoke checks, beside its manifest.
const SmokeFile = "smoke.yaml"

// smokeSpec is smoke.yaml: the HTTP calls to make to a running instance,
// and the usage the app must report for them.
type smokeSpec struct {
	// Params are the launch parameters (JSON Schema-checked like a launch).
	Params map[string]any `yaml:"params"`
	Checks []smokeCheck   `yaml:"checks"`
	// Set are KEY=VALUE settings (as gpuaas manifest --set) applied when
	// the smoke registers the manifest: e.g. let a CPU stand-in of a GPU
	// app be placed on a machine with no GPU. The release registers the
	// manifest without them.
	Set   []string `yaml:"set"`
	Usage *struct {
		Unit string `yaml:"unit"`
		// Min is the least total the app must report before it is stopped.
		Min int64 `yaml:"min"`
		// Within bounds the wait for it (default 60s).
		Within time.Duration `yaml:"within"`
	} `yaml:"usage"`
}

type smokeCheck struct {
	Name         string `yaml:"name"`
	Method       string `yaml:"method"` // default GET
	Path         string `yaml:"path"`
	Body         string `yaml:"body"`
	Status       int    `yaml:"status"` // default 200
	BodyContains string `yaml:"body_contains"`
}

func readSmokeSpec(dir string) (smokeSpec, error) {
	var s smokeSpec
	b, err := os.ReadFile(filepath.Join(dir, SmokeFile))
	if errors.Is(err, os.ErrNotExist) {
		return s, nil // no checks: launch, stop, verify teardown
	}
	if err != nil {
		return s, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil && !errors.Is(err, io.EOF) {
		return s, fmt.Errorf("%s: %w", filepath.Join(dir, SmokeFile), err)
	}
	for i, c := range s.Checks {
		if !strings.HasPrefix(c.Path, "/") {
			return s, fmt.Errorf("%s: checks[%d].path %q must start with /", SmokeFile, i, c.Path)
		}
	}
	for i, kv := range s.Set {
		if _, err := manifest.ParseSetting(kv); err != nil {
			return s, fmt.Errorf("%s: set[%d]: %w", SmokeFile, i, err)
		}
	}
	return s, nil
}

func newAppSmokeCmd() *cobra.Command {
	var images []string
	var devDir string
	cmd := &cobra.Command{
		Use:   "smoke [DIR] --image IMAGE",
		Short: "Run an app image as the platform would, check it, and tear it down (a local release rehearsal)",
		Long: `Take the app in DIR (default .: its gpuaas.yaml and smoke.yaml) and IMAGE
(an image in the local Docker engine) through what a release does, on a
control plane of its own started in this process (or the gpuaas dev whose
data dir is --dev), with its node agent running the workload on this
machine's Docker exactly as on a GPU host: push signed, verify, promote,
register, publish, entitle, launch (identity mounted, readiness probed),
the HTTP checks of smoke.yaml, the usage the app must report, decommission,
and a check that nothing labelled with the instance remains.

Each step prints with its time. On a failure the step, the reason and the
workload's last log lines are printed and the exit status is 1.

smoke.yaml:
  params: {greeting: hi}                 # launch parameters (optional)
  checks:
    - {name: answers, path: /, status: 200, body_contains: "from my-app"}
  usage: {unit: requests, min: 1, within: 60s}
  set:                                   # manifest --set values for the rehearsal only,
    - version.compatibility.min_gpu_count=0   # e.g. a CPU stand-in of a GPU app

A version that lists artifacts (docker_compose) takes --image NAME=IMAGE for
each artifact, or one --image IMAGE when it lists one.`,
		Example: `  go build -o app . && cp /etc/ssl/certs/ca-certificates.crt . && docker build -q -f Dockerfile.prebuilt -t hello:smoke .
  gpuaas app smoke --image hello:smoke`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := "."
			if len(args) == 1 {
				dir = args[0]
			}
			if len(images) == 0 {
				return usageError{"--image is required: the image to smoke-test, e.g. docker build -t my-app:smoke . then --image my-app:smoke"}
			}
			s := &smokeRun{out: cmd.OutOrStdout(), dir: dir, images: images, devDir: devDir}
			return s.run(cmd.Context())
		},
	}
	cmd.Flags().StringArrayVar(&images, "image", nil, "the app image in the local Docker engine (required); for a version that lists several artifacts, NAME=IMAGE for each")
	cmd.Flags().StringVar(&devDir, "dev", "", "use the running gpuaas dev with this data dir (e.g. .gpuaas) instead of starting a control plane")
	return cmd
}

type smokeRun struct {
	out           io.Writer
	dir, devDir   string
	images        []string // IMAGE, or NAME=IMAGE per artifact
	work          string   // keys, CLI config, logs
	apiURL        string
	slug, version string
	instance      string
	// heartbeat is the version's health.heartbeat_timeout_seconds: the
	// workload promises a heartbeat at least this often.
	heartbeat time.Duration
	started   time.Time
	ctx       context.Context // of the gpuaas commands run
}

// step runs fn and prints its outcome and time.
func (s *smokeRun) step(name string, fn func() (string, error)) error {
	t := time.Now()
	note, err := fn()
	d := time.Since(t).Round(10 * time.Millisecond)
	if err != nil {
		fmt.Fprintf(s.out, "  ✗ %-22s %7s  %v\n", name, d, err)
		return &smokeFailure{step: name, err: err}
	}
	fmt.Fprintf(s.out, "  ✓ %-22s %7s  %s\n", name, d, note)
	return nil
}

type smokeFailure struct {
	step string
	err  error
}

func (f *smokeFailure) Error() string { return "smoke failed at " + f.step + ": " + f.err.Error() }

func (s *smokeRun) run(ctx context.Context) (err error) {
	s.started, s.ctx = time.Now(), ctx
	spec, err := readSmokeSpec(s.dir)
	if err != nil {
		return err
	}
	// Which image is which artifact, before anything starts.
	var pushes []smokePush
	if s.slug, pushes, err = s.plan(); err != nil {
		return err
	}
	s.work, err = os.MkdirTemp("", "gpuaas-smoke-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(s.work)
	fmt.Fprintf(s.out, "smoke %s with %s\n", s.dir, strings.Join(s.images, ", "))
	// Deferred in this order so that, on a failure, the logs are read and
	// the instance taken down while the control plane still runs.
	var admin smokeCreds
	var stopControlPlane func()
	defer func() {
		if stopControlPlane != nil {
			stopControlPlane()
		}
	}()
	defer func() {
		var f *smokeFailure
		if errors.As(err, &f) {
			s.printWorkloadLogs(ctx)
			s.cleanUp(ctx)
			err = exitCode(1)
		}
	}()
	if err := s.step("control plane", func() (string, error) {
		var err error
		admin, stopControlPlane, err = s.controlPlane(ctx)
		if s.devDir != "" {
			return s.apiURL + " (the gpuaas dev of " + s.devDir + ")", err
		}
		return s.apiURL + " (in this process)", err
	}); err != nil {
		return err
	}
	for _, kv := range [][2]string{{envConfigDir, filepath.Join(s.work, "config")}, {envAPIURL, s.apiURL}, {envToken, ""}, {envProfile, ""},
		{"GPUAAS_PROJECT_ID", admin.ProjectID}} {
		if err := os.Setenv(kv[0], kv[1]); err != nil {
			return err
		}
	}
	s.version = fmt.Sprintf("0.0.0-smoke.%d", time.Now().Unix())
	if err := s.step("sign in", func() (string, error) {
		_, err := s.cli(admin.AdminPassword+"\n", "login", "--email", admin.AdminEmail, "--password-stdin")
		return admin.AdminEmail, err
	}); err != nil {
		return err
	}
	sets := []string{"version=" + s.version}
	if err := s.step("push, signed", func() (string, error) {
		key := filepath.Join(s.work, "cosign")
		if _, err := s.cli("", "artifact", "keygen", "--out", key); err != nil {
			return "", err
		}
		if _, err := s.cli("", "artifact", "signing-key", "add", "--name", "smoke-"+s.version, "--public-key-file", key+".pub"); err != nil {
			return "", err
		}
		var notes []string
		for _, p := range pushes {
			out, err := s.cli("", "artifact", "push", p.image, "--app", s.slug, "--version", s.version, "--name", p.name, "--sign-key", key+".key", "-o", "json")
			if err != nil {
				return "", err
			}
			var art struct{ Repository, Digest string }
			if err := json.Unmarshal([]byte(out), &art); err != nil {
				return "", fmt.Errorf("push answer: %w", err)
			}
			if p.imageRef {
				ref := strings.TrimPrefix(strings.TrimPrefix(s.apiURL, "http://"), "https://") + "/" + art.Repository + "@" + art.Digest
				sets = append(sets, "image_ref="+ref)
				notes = append(notes, ref)
			} else {
				sets = append(sets, "artifact."+p.name+"="+art.Repository+"@"+art.Digest)
				notes = append(notes, p.name+" "+art.Repository+"@"+art.Digest)
			}
		}
		return strings.Join(notes, ", "), nil
	}); err != nil {
		return err
	}
	if err := s.step("verify, promote", func() (string, error) {
		for _, p := range pushes {
			artifact := s.slug + "/" + s.version + "/" + p.name
			if _, err := s.cli("", "artifact", "verify", artifact, "--reason", "smoke"); err != nil {
				return "", err
			}
			for _, st := range []string{"staged", "canary", "active"} {
				if _, err := s.cli("", "artifact", "promote", artifact, "--to", st, "--reason", "smoke"); err != nil {
					return "", err
				}
			}
		}
		return "verified, active", nil
	}); err != nil {
		return err
	}
	if err := s.step("register, publish", func() (string, error) {
		args := []string{"manifest", "register", filepath.Join(s.dir, scaffold.ManifestFile)}
		for _, kv := range append(sets, spec.Set...) {
			args = append(args, "--set", kv)
		}
		if _, err := s.cli("", args...); err != nil {
			return "", err
		}
		if _, err := s.cli("", "app", "publish", s.slug, s.version, "--reason", "smoke"); err != nil {
			return "", err
		}
		_, err := s.cli("", "app", "entitle", s.slug, "--mode", "tenant_dedicated", "--scope", "project")
		note := s.slug + " " + s.version
		if len(spec.Set) > 0 {
			note += fmt.Sprintf(" (with %d setting(s) of %s)", len(spec.Set), SmokeFile)
		}
		return note, err
	}); err != nil {
		return err
	}
	if s.devDir != "" {
		if err := s.step("node ready", func() (string, error) { return s.waitAllocation(ctx) }); err != nil {
			return err
		}
	}
	var url string
	if err := s.step("launch", func() (string, error) {
		args := []string{"instance", "create", s.slug, s.version, "--name", "smoke", "--wait", "-o", "json"}
		if len(spec.Params) > 0 {
			b, _ := json.Marshal(spec.Params)
			args = append(args, "--params", string(b))
		}
		out, err := s.cli("", args...)
		var created client.AppInstance
		if jerr := json.Unmarshal([]byte(lastJSON(out)), &created); jerr == nil && created.ID != "" {
			s.instance = created.ID
		}
		if err != nil && s.instance != "" {
			// The platform's own account of why is better than --wait's trace.
			if inst, gerr := s.instanceGet(); gerr == nil {
				return "", fmt.Errorf("the instance is %s: %s: %s", inst.Status, inst.ReasonCode, inst.ReasonMessage)
			}
		}
		if err != nil {
			return "", err
		}
		if created.Status != "running" {
			return "", fmt.Errorf("instance %s is %s (%s)", created.ID, created.Status, created.ReasonCode)
		}
		inst, err := s.instanceGet()
		if err != nil {
			return "", err
		}
		if inst.Access == nil {
			return "", fmt.Errorf("instance %s is running but names no access URL", inst.ID)
		}
		url = strings.TrimRight(inst.Access.LocalURL, "/")
		return "running at " + url, nil
	}); err != nil {
		return err
	}
	for _, c := range spec.Checks {
		if err := s.step("check "+c.name(), func() (string, error) { return s.check(ctx, url, c) }); err != nil {
			return err
		}
	}
	if spec.Usage != nil {
		if err := s.step("usage reported", func() (string, error) { return s.waitUsage(ctx, spec.Usage.Unit, spec.Usage.Min, spec.Usage.Within) }); err != nil {
			return err
		}
	}
	if s.heartbeat > 0 {
		if err := s.step("heartbeat", func() (string, error) { return s.waitHeartbeat(ctx) }); err != nil {
			return err
		}
	}
	if err := s.step("decommission", func() (string, error) {
		_, err := s.cli("", "instance", "decommission", s.instance, "--wait")
		return "stopped with SIGTERM", err
	}); err != nil {
		return err
	}
	if err := s.step("nothing left", func() (string, error) {
		n, err := s.labelledContainers(ctx)
		if err != nil {
			return "", err
		}
		if n > 0 {
			return "", fmt.Errorf("%d container(s) labelled with the instance remain", n)
		}
		return "no container labelled with the instance", nil
	}); err != nil {
		return err
	}
	if spec.Usage != nil {
		if err := s.step("usage deduplicated", func() (string, error) { return s.checkUsageOnce(spec.Usage.Unit, spec.Usage.Min) }); err != nil {
			return err
		}
	}
	fmt.Fprintf(s.out, "smoke passed in %s\n", time.Since(s.started).Round(100*time.Millisecond))
	return nil
}

// smokePush is one local image to push as one of the version's artifacts.
type smokePush struct {
	name, image string
	imageRef    bool // the launchable image: registered as image_ref
}

// plan reads the manifest and matches --image to its artifacts: a
// launchable_oci version takes one image (its image_ref); a version that
// lists artifacts takes NAME=IMAGE for each, or one IMAGE when it lists one.
func (s *smokeRun) plan() (slug string, out []smokePush, err error) {
	file := filepath.Join(s.dir, scaffold.ManifestFile)
	data, err := os.ReadFile(file)
	if err != nil {
		return "", nil, err
	}
	pkg, problems, err := manifest.Parse(data, file)
	if err != nil {
		return "", nil, err
	}
	if len(problems) > 0 || len(pkg.Versions) != 1 {
		return "", nil, fmt.Errorf("%s is not a valid manifest of one version: run gpuaas manifest validate %s", file, file)
	}
	v := pkg.Versions[0]
	if p := v.RuntimeProfile; p != nil && p.Health != nil {
		s.heartbeat = time.Duration(p.Health.HeartbeatTimeoutSeconds) * time.Second
	}
	named := map[string]string{}
	var bare []string
	for _, img := range s.images {
		if name, image, ok := strings.Cut(img, "="); ok {
			named[name] = image
		} else {
			bare = append(bare, img)
		}
	}
	if len(v.Artifacts) == 0 {
		if len(s.images) != 1 || len(bare) != 1 {
			return "", nil, fmt.Errorf("%s runs one image (its image_ref): give one --image IMAGE", file)
		}
		return pkg.App.Slug, []smokePush{{name: catalog.DefaultArtifactName, image: bare[0], imageRef: true}}, nil
	}
	var names []string
	for _, a := range v.Artifacts {
		names = append(names, a.Name)
	}
	if len(bare) == 1 && len(named) == 0 && len(v.Artifacts) == 1 {
		named[v.Artifacts[0].Name] = bare[0]
	} else if len(bare) > 0 {
		return "", nil, fmt.Errorf("%s lists the artifacts %s: give --image NAME=IMAGE for each", file, strings.Join(names, ", "))
	}
	for _, a := range v.Artifacts {
		img, ok := named[a.Name]
		if !ok {
			return "", nil, fmt.Errorf("no --image %s=IMAGE for the artifact %s (the version lists %s)", a.Name, a.Name, strings.Join(names, ", "))
		}
		delete(named, a.Name)
		out = append(out, smokePush{name: a.Name, image: img})
	}
	for n := range named {
		return "", nil, fmt.Errorf("--image %s=…: the version has no artifact %s (it lists %s)", n, n, strings.Join(names, ", "))
	}
	return pkg.App.Slug, out, nil
}

// waitAllocation waits for the project's active allocation: a gpuaas dev
// started a moment ago may still be bringing up its node.
func (s *smokeRun) waitAllocation(ctx context.Context) (string, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		out, err := s.cli("", "allocation", "list", "-o", "json")
		if err != nil {
			return "", err
		}
		var page struct {
			Items []client.Allocation `json:"items"`
		}
		_ = json.Unmarshal([]byte(out), &page)
		for _, a := range page.Items {
			if a.State == "active" {
				return "allocation " + a.ID, nil
			}
		}
		if time.Now().After(deadline) {
			return "", errors.New("the project has no active allocation after a minute: is a Docker engine answering for gpuaas dev's node? (gpuaas node list)")
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(500 * time.Millisecond): // another process's node coming up; nothing to subscribe to here
		}
	}
}

// instanceGet reads the smoke's instance as the platform has it.
func (s *smokeRun) instanceGet() (client.AppInstance, error) {
	var inst client.AppInstance
	out, err := s.cli("", "instance", "get", s.instance, "-o", "json")
	if err != nil {
		return inst, err
	}
	return inst, json.Unmarshal([]byte(out), &inst)
}

func (c smokeCheck) name() string {
	if c.Name != "" {
		return c.Name
	}
	return c.method() + " " + c.Path
}

func (c smokeCheck) method() string {
	if c.Method == "" {
		return http.MethodGet
	}
	return strings.ToUpper(c.Method)
}

func (s *smokeRun) check(ctx context.Context, base string, c smokeCheck) (string, error) {
	want := c.Status
	if want == 0 {
		want = http.StatusOK
	}
	req, err := http.NewRequestWithContext(ctx, c.method(), base+c.Path, strings.NewReader(c.Body))
	if err != nil {
		return "", err
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != want {
		return "", fmt.Errorf("%s %s answered %d, want %d: %s", c.method(), c.Path, resp.StatusCode, want, clip(body))
	}
	if c.BodyContains != "" && !bytes.Contains(body, []byte(c.BodyContains)) {
		return "", fmt.Errorf("%s %s: body lacks %q: %s", c.method(), c.Path, c.BodyContains, clip(body))
	}
	return fmt.Sprintf("%d %s", resp.StatusCode, clip(body)), nil
}

func clip(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return s
}

func (s *smokeRun) usage(unit string) ([]client.UsageRecord, error) {
	out, err := s.cli("", "usage", "--instance", s.instance, "--unit", unit, "--limit", "500", "-o", "json")
	if err != nil {
		return nil, err
	}
	var page struct {
		Items []client.UsageRecord `json:"items"`
	}
	return page.Items, json.Unmarshal([]byte(out), &page)
}

func (s *smokeRun) waitUsage(ctx context.Context, unit string, min int64, within time.Duration) (string, error) {
	if within <= 0 {
		within = time.Minute
	}
	deadline := time.Now().Add(within)
	var total int64
	for {
		rows, err := s.usage(unit)
		if err != nil {
			return "", err
		}
		total = 0
		for _, r := range rows {
			total += r.Quantity
		}
		if total >= min {
			return fmt.Sprintf("%d %s in %d report(s)", total, unit, len(rows)), nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("%d %s reported in %s, want at least %d (does the app report with its identity? see its log)", total, unit, within, min)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(time.Second): // usage arrives on the app's own schedule
		}
	}
}

// waitHeartbeat waits, at most the version's heartbeat timeout, for the
// workload's heartbeat to reach the platform with its own identity.
func (s *smokeRun) waitHeartbeat(ctx context.Context) (string, error) {
	deadline := time.Now().Add(s.heartbeat)
	for {
		inst, err := s.instanceGet()
		if err != nil {
			return "", err
		}
		if h := inst.Health; h.LastHeartbeatAt != "" && h.State == "healthy" {
			return "healthy, last heartbeat " + h.LastHeartbeatAt, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no heartbeat within %s (health.heartbeat_timeout_seconds); the instance's health is %s: the app must post a heartbeat runtime event with its identity (docs/instances.md#runtime-events)",
				s.heartbeat, inst.Health.State)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(time.Second): // heartbeats arrive on the app's own schedule
		}
	}
}

func (s *smokeRun) checkUsageOnce(unit string, min int64) (string, error) {
	rows, err := s.usage(unit)
	if err != nil {
		return "", err
	}
	seen := map[string]bool{}
	var total int64
	for _, r := range rows {
		k := r.EventSource + " " + r.EventID
		if seen[k] {
			return "", fmt.Errorf("event %s counted twice", k)
		}
		seen[k] = true
		total += r.Quantity
	}
	if total < min {
		return "", fmt.Errorf("%d %s after the stop, want at least %d", total, unit, min)
	}
	return fmt.Sprintf("%d %s in %d distinct report(s) after the stop", total, unit, len(rows)), nil
}

// cli runs one gpuaas command in this process, as a user would type it.
func (s *smokeRun) cli(stdin string, args ...string) (string, error) {
	// Locked: a --wait's operation poller may write a retry line from its
	// own goroutine while the command writes its progress.
	var outBuf, errBuf bytes.Buffer
	out, errOut := &lockedWriter{w: &outBuf}, &lockedWriter{w: &errBuf}
	root := NewRoot(out, errOut)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(args)
	if err := root.ExecuteContext(s.ctx); err != nil {
		// What the command printed, less the lines that only said it
		// waited to send a request again: the refusal that ended it is
		// then the error's own message.
		var lines []string
		for _, l := range strings.Split(strings.TrimSpace(errOut.String(&errBuf)), "\n") {
			if l != "" && !isRetryLine(l) {
				lines = append(lines, l)
			}
		}
		msg := strings.Join(lines, "\n")
		if msg == "" {
			msg = describeError(nil, err)
		}
		return out.String(&outBuf), fmt.Errorf("gpuaas %s: %s", strings.Join(args[:min(len(args), 3)], " "), msg)
	}
	return out.String(&outBuf), nil
}

// lastJSON is the last top-level JSON document of out (a --wait prints
// progress before the result).
func lastJSON(out string) string {
	if i := strings.LastIndex(out, "\n{"); i >= 0 {
		return out[i+1:]
	}
	return out
}

type smokeCreds struct {
	APIURL        string `json:"api_url"`
	ProjectID     string `json:"project_id"`
	AdminEmail    string `json:"admin_email"`
	AdminPassword string `json:"admin_password"`
}

// controlPlane starts one in this process (SQLite and the registry under
// the work dir, the node agent on this machine's Docker), or reads the
// credentials of the running gpuaas dev in --dev.
func (s *smokeRun) controlPlane(ctx context.Context) (smokeCreds, func(), error) {
	var c smokeCreds
	if s.devDir != "" {
		b, err := os.ReadFile(server.CredentialsPath(s.devDir))
		if err != nil {
			return c, nil, fmt.Errorf("--dev %s: %w (is gpuaas dev running with that data dir?)", s.devDir, err)
		}
		if err := json.Unmarshal(b, &c); err != nil {
			return c, nil, err
		}
		s.apiURL = c.APIURL
		return c, nil, nil
	}
	cfg := config.Defaults()
	cfg.DataDir = filepath.Join(s.work, "platform")
	cfg.Listen = "127.0.0.1:0"
	cfg, err := server.DevConfig(cfg)
	if err != nil {
		return c, nil, err
	}
	if err := cfg.Validate(); err != nil {
		return c, nil, err
	}
	logFile, err := os.Create(filepath.Join(s.work, "control-plane.log"))
	if err != nil {
		return c, nil, err
	}
	// The in-process node agent logs to the default logger: into the file
	// too, so that the steps are what the terminal shows.
	logger := slog.New(slog.NewTextHandler(logFile, nil))
	prevDefault := slog.Default()
	slog.SetDefault(logger)
	ctx, cancel := context.WithCancel(ctx)
	app, err := server.New(ctx, cfg, logger)
	if err != nil {
		cancel()
		return c, nil, err
	}
	done := make(chan error, 1)
	stop := func() {
		cancel()
		<-done
		_ = app.Close()
		slog.SetDefault(prevDefault)
		_ = logFile.Close()
	}
	if err := app.Listen(); err != nil {
		cancel()
		_ = app.Close()
		return c, nil, err
	}
	creds, err := app.SeedDev(ctx)
	if err != nil {
		cancel()
		_ = app.Close()
		return c, nil, err
	}
	socket := server.DockerSocket()
	if !server.DockerAnswers(ctx, socket) {
		cancel()
		_ = app.Close()
		return c, nil, fmt.Errorf("no Docker engine answers at %s: the workload cannot run", socket)
	}
	if err := app.ListenForWorkloads(ctx, socket); err != nil {
		cancel()
		_ = app.Close()
		return c, nil, err
	}
	go func() { done <- app.Serve(ctx) }()
	n := app.StartDevNode(ctx, devAgentStarter, creds, 60*time.Second)
	if n.Stop != nil {
		inner := stop
		stop = func() { n.Stop(); inner() }
	}
	if n.AllocationID == "" {
		stop()
		return c, nil, fmt.Errorf("no node: %s", n.Reason)
	}
	s.apiURL = creds.APIURL
	return smokeCreds{APIURL: creds.APIURL, ProjectID: creds.ProjectID, AdminEmail: creds.AdminEmail, AdminPassword: creds.AdminPassword}, stop, nil
}

// instanceContainers lists the containers, running or not, labelled with
// the instance; the caller closes the client.
func (s *smokeRun) instanceContainers(ctx context.Context) (*docker.Client, []container.Summary, error) {
	c, err := docker.New(docker.FromEnv, docker.WithAPIVersionNegotiation())
	if err != nil {
		return nil, nil, err
	}
	res, err := c.ContainerList(ctx, docker.ContainerListOptions{All: true, Filters: docker.Filters{}.Add("label", nodeapi.LabelInstance+"="+s.instance)})
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, res.Items, nil
}

// labelledContainers counts containers, running or not, labelled with the
// instance: what the node agent must have removed.
func (s *smokeRun) labelledContainers(ctx context.Context) (int, error) {
	c, items, err := s.instanceContainers(ctx)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	return len(items), nil
}

// cleanUp takes down what a failed smoke launched: through the platform
// first (as a passing one does), then, when the platform is this process's
// and is about to go, whatever labelled container is left.
func (s *smokeRun) cleanUp(ctx context.Context) {
	if s.instance == "" {
		return
	}
	outer := s.ctx
	var cancel context.CancelFunc
	s.ctx, cancel = context.WithTimeout(ctx, time.Minute)
	_, _ = s.cli("", "instance", "decommission", s.instance, "--wait")
	cancel()
	s.ctx = outer
	if s.devDir != "" {
		return
	}
	c, items, err := s.instanceContainers(ctx)
	if err != nil {
		return
	}
	defer c.Close()
	for _, it := range items {
		_, _ = c.ContainerRemove(ctx, it.ID, docker.ContainerRemoveOptions{Force: true})
	}
}

// printWorkloadLogs shows the last lines the workload wrote: the ones the
// platform kept with a failure, else the container's own.
func (s *smokeRun) printWorkloadLogs(ctx context.Context) {
	if s.instance == "" {
		return
	}
	lines := s.platformLogs()
	if len(lines) == 0 {
		lines = s.containerLogs(ctx)
	}
	if len(lines) == 0 {
		fmt.Fprintf(s.out, "  (the workload wrote no log lines)\n")
		return
	}
	fmt.Fprintf(s.out, "  last log lines of the workload:\n")
	for _, l := range lines {
		fmt.Fprintf(s.out, "    %s\n", l)
	}
}

func (s *smokeRun) platformLogs() []string {
	out, err := s.cli("", "instance", "logs", s.instance, "-o", "json")
	if err != nil {
		return nil
	}
	var l struct {
		Lines []string `json:"lines"`
	}
	_ = json.Unmarshal([]byte(out), &l)
	return tail(l.Lines, 20)
}

func (s *smokeRun) containerLogs(ctx context.Context) []string {
	c, items, err := s.instanceContainers(ctx)
	if err != nil {
		return nil
	}
	defer c.Close()
	if len(items) == 0 {
		return nil
	}
	return (&agentdocker.Driver{C: c}).LogTail(ctx, items[0].ID, 20)
}

func tail(lines []string, n int) []string {
	if len(lines) > n {
		return lines[len(lines)-n:]
	}
	return lines
}
