// Jupyter (CUDA dev): a gpuaas app, started by `gpuaas init --template jupyter`.
//
// The image's entrypoint, in front of JupyterLab:
//   - it installs the launch's extra packages (the pip_packages parameter,
//     checked as PEP 508 requirements by the platform before the launch) and
//     fails the start with pip's reason when they cannot be installed;
//   - it starts JupyterLab (JUPYTER_COMMAND, default `jupyter lab`) on port
//     8888 without a token of its own: the platform's UI gateway signs the
//     user in and is the only way to the port, and the lab serves under
//     GPUAAS_UI_BASE_PATH when the gateway uses path mode;
//   - SIGTERM stops it cleanly: the lab gets SIGTERM and stops its kernels,
//     exit 0; a second signal changes nothing.
//
// Readiness is the lab's own GET /api/status (gpuaas.yaml). The app meters
// session_seconds, which the platform measures itself from the instance's
// running time: there is nothing for the app to report.
package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// version is set at build time (-ldflags "-X main.version=1.2.0").
var version = "dev"

// params are the launch parameters (gpuaas.yaml's runtime_profile.parameters),
// handed over by the platform in GPUAAS_PARAMETERS with defaults applied.
type params struct {
	PipPackages []string `json:"pip_packages"`
	NotebookDir string   `json:"notebook_dir"`
}

const labPort = "8888"

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if err := run(log); err != nil {
		log.Error("stopped", "err", err)
		os.Exit(1)
	}
}

func run(log *slog.Logger) error {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	var p params
	if raw := os.Getenv("GPUAAS_PARAMETERS"); raw != "" {
		if err := json.Unmarshal([]byte(raw), &p); err != nil {
			return fmt.Errorf("GPUAAS_PARAMETERS: %w", err)
		}
	}
	if len(p.PipPackages) > 0 {
		pip := strings.Fields(envOr("PIP_COMMAND", "python3 -m pip"))
		// "--" ends pip's options: a requirement can never be read as one.
		args := append(append(pip[1:], "install", "--no-cache-dir", "--"), p.PipPackages...)
		log.Info("installing packages", "packages", p.PipPackages)
		cmd := exec.Command(pip[0], args...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("pip install %s: %w", strings.Join(p.PipPackages, " "), err)
		}
	}

	labArgs := []string{"--no-browser", "--ip=0.0.0.0", "--port=" + labPort,
		"--IdentityProvider.token=", "--ServerApp.password=", "--ServerApp.allow_remote_access=True"}
	if base := os.Getenv("GPUAAS_UI_BASE_PATH"); base != "" {
		labArgs = append(labArgs, "--ServerApp.base_url="+base)
	}
	if p.NotebookDir != "" {
		if err := os.MkdirAll(p.NotebookDir, 0o755); err != nil {
			return err
		}
		labArgs = append(labArgs, "--ServerApp.root_dir="+p.NotebookDir)
	}
	command := strings.Fields(envOr("JUPYTER_COMMAND", "jupyter lab"))
	lab := exec.Command(command[0], append(command[1:], labArgs...)...)
	lab.Stdout, lab.Stderr = os.Stdout, os.Stderr
	if err := lab.Start(); err != nil {
		return fmt.Errorf("start JupyterLab %q: %w", command[0], err)
	}
	exited := make(chan error, 1)
	go func() { exited <- lab.Wait() }()

	log.Info("serving", "port", labPort, "version", version)

	select {
	case err := <-exited:
		return fmt.Errorf("JupyterLab exited: %v", err)
	case s := <-sigs:
		log.Info("stopping", "signal", s.String())
	}
	_ = lab.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(25 * time.Second): // the platform's stop grace is longer
		_ = lab.Process.Kill()
		<-exited
	}
	log.Info("stopped cleanly")
	return nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
