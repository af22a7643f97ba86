package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
)

// `gpuaas events list` prints a page; `events watch` prints live events as
// JSON lines and resumes after --after.
func TestEventsCommands(t *testing.T) {
	s := servertest.Start(t, store.SQLite)
	t.Setenv(envConfigDir, filepath.Join(t.TempDir(), "config"))
	t.Setenv(envAPIURL, s.URL)
	t.Setenv(envToken, s.Admin().Token)
	run := func(ctx context.Context, stdout io.Writer, args ...string) error {
		root := NewRoot(stdout, io.Discard)
		root.SetArgs(args)
		return root.ExecuteContext(ctx)
	}
	admin := s.Admin()
	for _, slug := range []string{"one", "two"} {
		admin.Do("POST", "/api/v1/projects/"+s.Creds.ProjectID+"/service-accounts", map[string]any{"name": slug, "slug": slug}).Want(t, 201)
	}
	s.SettleEvents()
	var out bytes.Buffer
	if err := run(context.Background(), &out, "events", "list", "--project", s.Creds.ProjectID, "--type", "iam."); err != nil {
		t.Fatal(err)
	}
	var page struct {
		Items []struct {
			Sequence int64  `json:"sequence"`
			Type     string `json:"type"`
		} `json:"items"`
	}
	if err := json.Unmarshal(out.Bytes(), &page); err != nil || len(page.Items) != 2 {
		t.Fatalf("list: %v %s", err, out.String())
	}
	if err := run(context.Background(), io.Discard, "events", "list"); err == nil || !strings.Contains(err.Error(), "--project") {
		t.Fatalf("list without a scope: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, pw, "events", "watch", "--project", s.Creds.ProjectID, "--after", "1")
		pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	if !sc.Scan() || !strings.Contains(sc.Text(), `"sequence":2`) {
		t.Fatalf("watch --after 1 printed %q first", sc.Text())
	}
	cancel()
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if err := <-done; err != nil {
		t.Fatalf("watch ended with %v", err)
	}
}
