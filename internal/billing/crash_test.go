package billing_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/billing"
	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
	"github.com/gpuaas/gpuaas/internal/testbin"
)

// gpuaasBinary is ./cmd/gpuaas, built once per test process.
func gpuaasBinary(t *testing.T) string { return testbin.Gpuaas(t) }

// child is a gpuaas server running as a separate process.
type child struct {
	cmd  *exec.Cmd
	base string
}

// startChild starts `gpuaas server` on a port of its own choosing (port 0;
// it reports the bound address with --addr-file) and waits until it is ready.
func startChild(t *testing.T, bin, dbURL, dataDir string) *child {
	t.Helper()
	addrFile := filepath.Join(t.TempDir(), "addr") // a fresh file: a killed child leaves its own behind
	cmd := exec.Command(bin, "server", "--database-url", dbURL, "--listen", "127.0.0.1:0", "--addr-file", addrFile,
		"--data-dir", dataDir, "--log-level", "warn", "--billing-meter-interval", "1h")
	cmd.Env = append(os.Environ(), "GPUAAS_SECRET_KEY="+base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32)))
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return &child{cmd: cmd, base: testbin.WaitReady(t, addrFile, 60*time.Second, logs.String)}
}

func (c *child) kill9(t *testing.T) {
	if err := c.cmd.Process.Kill(); err != nil { // SIGKILL: no shutdown, no flush
		t.Error(err)
	}
	_ = c.cmd.Wait()
}

// post sends events and returns the per-event results, or an error when no
// answer came back (the server died mid-request).
func post(hc *http.Client, base, path, token string, events []map[string]any) ([]billing.EventResult, error) {
	body, err := json.Marshal(events)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequest("POST", base+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", billing.MediaTypeBatch)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	var res billing.IngestResult
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		return nil, err // a cut-off answer is no acknowledgement
	}
	return res.Results, nil
}

// TestKillDuringIngestBurst: a real gpuaas server process is killed with
// SIGKILL in the middle of a burst of 10,000 usage events. After a restart
// every acknowledged event is in the store, and posting the whole burst
// again counts nothing twice: the store ends with exactly 10,000 records.
func TestKillDuringIngestBurst(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the gpuaas binary")
	}
	bin := gpuaasBinary(t)
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		ctx := context.Background()
		dbURL := storetest.URL(t, d)
		s := servertest.Start(t, d, quietWorkers, func(c *config.Config) { c.DatabaseURL = dbURL })
		admin := s.Admin()
		pid := s.Creds.ProjectID
		wl := newWorkload(t, s, admin, pid, "tok-app", "tokens", "", time.Now().Add(-time.Hour), time.Time{})
		dataDir := t.TempDir()
		c := startChild(t, bin, dbURL, dataDir)

		// Batches of 100 from 4 concurrent clients: SQLite serialises writers
		// across the two processes, so fewer, larger commits keep the test short.
		const total, batch, workers = 10_000, 100, 4
		source := "//tok-app/" + wl.ID
		at := time.Now().UTC().Add(-time.Minute)
		batches := make(chan []map[string]any, total/batch)
		var all [][]map[string]any
		for i := 0; i < total; i += batch {
			var b []map[string]any
			for j := i; j < i+batch; j++ {
				b = append(b, usageEvent(fmt.Sprintf("burst-%05d", j), source, "tokens", 1, at))
			}
			all = append(all, b)
			batches <- b
		}
		close(batches)
		path := usagePath(pid, wl.ID)
		hc := &http.Client{Timeout: 30 * time.Second}
		var (
			mu     sync.Mutex
			acked  []string
			killed atomic.Bool
			wg     sync.WaitGroup
		)
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for b := range batches {
					res, err := post(hc, c.base, path, wl.Bot.Token, b)
					if err != nil {
						continue // no answer: not acknowledged
					}
					mu.Lock()
					for _, r := range res {
						acked = append(acked, r.ID)
					}
					n := len(acked)
					mu.Unlock()
					if n >= total/2 && killed.CompareAndSwap(false, true) {
						c.kill9(t)
					}
				}
			}()
		}
		wg.Wait()
		if !killed.Load() || len(acked) >= total {
			t.Fatalf("the server was not killed mid-burst (%d acknowledged)", len(acked))
		}
		t.Logf("%s: %d of %d events acknowledged before SIGKILL", d, len(acked), total)

		// Every acknowledged event survived the kill.
		q := s.DB.Queries()
		for _, id := range acked {
			if _, err := q.GetUsageByDedupeKey(ctx, billing.DedupeKeyForEvent(pid, source, id)); err != nil {
				t.Fatalf("acknowledged event %s is not in the store after SIGKILL: %v", id, err)
			}
		}

		// Restart; post the whole burst again: acknowledged events are
		// duplicates, the rest are recorded now, and nothing counts twice.
		c = startChild(t, bin, dbURL, dataDir)
		ackedSet := map[string]bool{}
		for _, id := range acked {
			ackedSet[id] = true
		}
		for _, b := range all {
			res, err := post(hc, c.base, path, wl.Bot.Token, b)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range res {
				if ackedSet[r.ID] && r.Status != "duplicate" {
					t.Fatalf("acknowledged event %s was recorded again after restart", r.ID)
				}
			}
		}
		got, err := q.GroupUsage(ctx, billing.UsageFilter{AppInstanceID: wl.ID}, nil)
		if err != nil || len(got) != 1 || got[0].Records != total || got[0].Quantity.Int64() != total {
			t.Fatalf("after restart and resend: %+v %v; want exactly %d records", got, err, total)
		}
	})
}
