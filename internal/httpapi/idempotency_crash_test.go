package httpapi_test

import (
	"bytes"
	"net/http"
	"testing"
)

// A real server killed between committing a keyed change and recording its
// answer (the process exits there, as on kill -9): after a restart, the
// retry with the same key does not run the change again. It learns the
// change took effect and what it changed; one org, one audit row.
//
// Serial (no t.Parallel): the restart binds the port the killed process
// held, which a parallel test's listener on port 0 could take meanwhile.
func TestIdempotentChangeSurvivesACrashBetweenCommitAndAnswer(t *testing.T) {
	p, s := startDev(t, buildGpuaas(t))
	admin := s.Admin()
	p.kill()
	p.env = []string{"GPUAAS_FAULT_EXIT_AFTER_SERVE=1"}
	p.start()

	body := []byte(`{"slug":"crash-once","name":"Crash once"}`)
	req, err := http.NewRequest("POST", s.URL+"/api/v1/orgs", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+admin.Token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Idempotency-Key", "crash-key")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close() // the answer may or may not leave before the exit
	}
	if err := p.cmd.Wait(); err == nil || p.cmd.ProcessState.ExitCode() != 137 {
		t.Fatalf("the server did not stop at the fault point: %v", err)
	}
	p.env = nil
	p.start()

	r := admin.Do("POST", "/api/v1/orgs", body, "X-Idempotency-Key", "crash-key").Want(t, 409)
	details, _ := r.JSON["error"].(map[string]any)["details"].(map[string]any)
	id, _ := details["resource_id"].(string)
	if r.ErrorCode() != "idempotency_key_committed" || details["resource_type"] != "org" || id == "" {
		t.Fatalf("retry after the crash: %s", r.Body)
	}
	if got := admin.Do("GET", "/api/v1/orgs/"+id, nil).Want(t, 200); got.String("slug") != "crash-once" {
		t.Fatalf("the committed org: %s", got.Body)
	}
	n := 0
	for _, o := range admin.Do("GET", "/api/v1/orgs?limit=500", nil).Want(t, 200).Items() {
		if o["slug"] == "crash-once" {
			n++
		}
	}
	audits := admin.Do("GET", "/api/v1/audit-events?action=org.create&resource_id="+id, nil).Want(t, 200).Items()
	if n != 1 || len(audits) != 1 {
		t.Fatalf("the change ran %d times with %d audit rows", n, len(audits))
	}
}
