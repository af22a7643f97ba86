package cli

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/client"
)

// notNowAPI is a stand-in API answering each request with the next of its
// answers (the last one again once they run out), recording what it was sent.
type notNowAPI struct {
	mu       sync.Mutex
	answers  []notNow
	requests []string
}

// notNow is one answer: a status, its Retry-After and its body.
type notNow struct {
	status     int
	retryAfter string
	body       string
}

func (a *notNowAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.requests = append(a.requests, r.Method+" "+r.URL.Path)
	next := a.answers[min(len(a.requests), len(a.answers))-1]
	a.mu.Unlock()
	if next.retryAfter != "" {
		w.Header().Set("Retry-After", next.retryAfter)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(next.status)
	_, _ = w.Write([]byte(next.body))
}

func (a *notNowAPI) sent() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.requests...)
}

// againstNotNow points the CLI at a stand-in API answering answers and
// returns the API and a runner of the CLI (exit status, stdout, stderr).
func againstNotNow(t *testing.T, answers ...notNow) (*notNowAPI, func(stdin string, args ...string) (int, string, string)) {
	t.Helper()
	api := &notNowAPI{answers: answers}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	t.Setenv(envConfigDir, filepath.Join(t.TempDir(), "config"))
	t.Setenv(envAPIURL, srv.URL)
	t.Setenv(envToken, "token")
	t.Setenv(envProfile, "")
	t.Setenv(envRetries, "")
	return api, func(stdin string, args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := Run(context.Background(), args, strings.NewReader(stdin), &out, &errOut)
		return code, out.String(), errOut.String()
	}
}

const (
	rateLimited = `{"error":{"code":"rate_limited","message":"too many requests from this address; wait a few seconds and retry","correlation_id":"c1"}}`
	unavailable = `{"error":{"code":"unavailable","message":"the database is unavailable; retry shortly","correlation_id":"c2"}}`
	me          = `{"id":"u1","type":"user","email":"a@example.com"}`
)

// A rate-limited command waits the server's Retry-After, saying so on
// stderr, sends the request again and succeeds.
func TestCLIWaitsOutARateLimit(t *testing.T) {
	api, run := againstNotNow(t, notNow{429, "1", rateLimited}, notNow{200, "", me})
	code, stdout, stderr := run("", "whoami", "-o", "json")
	if code != exitOK || !strings.Contains(stdout, `"u1"`) {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	want := "gpuaas: the server is rate limiting (429 rate_limited); sending it again in 1s (retry 1 of 3)\n"
	if stderr != want || len(api.sent()) != 2 {
		t.Fatalf("stderr %q, want %q; requests %v", stderr, want, api.sent())
	}
}

// --retries 0 (or GPUAAS_RETRIES=0) sends nothing again: the command fails
// at once with the server's message.
func TestCLIRetriesZeroFailsAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  string
		args []string
	}{
		{"flag", "", []string{"whoami", "--retries", "0"}},
		{"env", "0", []string{"whoami"}},
		{"flag over env", "5", []string{"--retries=0", "whoami"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api, run := againstNotNow(t, notNow{429, "1", rateLimited}, notNow{200, "", me})
			t.Setenv(envRetries, tc.env)
			code, _, stderr := run("", tc.args...)
			if code != exitError || !strings.Contains(stderr, "error: too many requests from this address; wait a few seconds and retry") ||
				strings.Contains(stderr, "sending it again") || len(api.sent()) != 1 {
				t.Fatalf("exit %d, stderr %q, requests %v", code, stderr, api.sent())
			}
		})
	}
}

// A 503 may come after a change committed: a read is sent again, but a
// request the server could not tell from its first try (sign-in carries no
// idempotency key) is not, and the command fails with the server's message.
func TestCLIResendsAfter503OnlyWhatIsSafe(t *testing.T) {
	api, run := againstNotNow(t, notNow{503, "1", unavailable}, notNow{200, "", me})
	code, _, stderr := run("", "whoami", "-o", "json")
	want := "gpuaas: the server is unavailable for now (503 unavailable); sending it again in 1s (retry 1 of 3)\n"
	if code != exitOK || stderr != want || len(api.sent()) != 2 {
		t.Fatalf("a read: exit %d, stderr %q, want %q; requests %v", code, stderr, want, api.sent())
	}

	api, run = againstNotNow(t, notNow{503, "1", unavailable}, notNow{200, "", `{"access_token":"t","expires_in":60}`})
	code, _, stderr = run("secret\n", "login", "--email", "a@example.com", "--password-stdin")
	if code != exitError || !strings.Contains(stderr, "the database is unavailable; retry shortly") ||
		strings.Contains(stderr, "sending it again") || len(api.sent()) != 1 {
		t.Fatalf("sign-in: exit %d, stderr %q, requests %v", code, stderr, api.sent())
	}
}

// A sign-in locked out after wrong passwords is not waited out for minutes:
// a Retry-After past the CLI's longest wait fails at once with the server's
// message, which says how long to wait.
func TestCLILoginLockoutFailsAtOnce(t *testing.T) {
	lockedOut := `{"error":{"code":"too_many_login_attempts","message":"too many failed sign-ins for this email; wait 900s and retry, or ask an admin to reset the password","correlation_id":"c3"}}`
	api, run := againstNotNow(t, notNow{429, "900", lockedOut}, notNow{200, "", `{"access_token":"t","expires_in":60}`})
	code, _, stderr := run("secret\n", "login", "--email", "a@example.com", "--password-stdin")
	if code != exitError || !strings.Contains(stderr, "wait 900s and retry") || strings.Contains(stderr, "sending it again") || len(api.sent()) != 1 {
		t.Fatalf("exit %d, stderr %q, requests %v", code, stderr, api.sent())
	}
}

// A --retries or GPUAAS_RETRIES that is not a count is a usage error, and
// nothing is sent.
func TestCLIRetriesMustBeACount(t *testing.T) {
	for _, tc := range []struct {
		env  string
		args []string
		want string
	}{
		{"", []string{"whoami", "--retries", "-1"}, "--retries -1"},
		{"many", []string{"whoami"}, `GPUAAS_RETRIES="many"`},
	} {
		api, run := againstNotNow(t, notNow{200, "", me})
		t.Setenv(envRetries, tc.env)
		if code, _, stderr := run("", tc.args...); code != exitUsage || !strings.Contains(stderr, tc.want) || len(api.sent()) != 0 {
			t.Errorf("%v (env %q): exit %d, stderr %q, requests %v", tc.args, tc.env, code, stderr, api.sent())
		}
	}
}

// What app smoke leaves out of a failed step's message is exactly the wait
// lines: both kinds are recognised, and nothing else the CLI prints is.
func TestRetryLinesAreRecognised(t *testing.T) {
	for _, status := range []int{429, 503} {
		line := retryLine(client.RetryNotice{Refusal: &client.APIError{Status: status, Code: "x"}, Wait: 2 * time.Second, Retry: 1, Retries: 3})
		if !isRetryLine(line) {
			t.Errorf("%q is not recognised as a wait line", line)
		}
	}
	for _, line := range []string{
		"gpuaas: the server is unavailable for now",
		"Key k1 written to sa.json (mode 0600). Use it with: gpuaas sa token --key-file sa.json",
		"gpuaas: instance get: not_found: no such instance; sending it again in 2s would not help",
	} {
		if isRetryLine(line) {
			t.Errorf("%q taken for a wait line", line)
		}
	}
}

// An answer to sa create that carries no private key (the stored repeat of
// a first answer lost on the way) fails the command, saying how to get a
// key, instead of exiting 0 with no key anywhere.
func TestSACreateWithoutItsKeyFails(t *testing.T) {
	created := `{"id":"sa-1","org_id":"o1","project_id":"11111111-1111-1111-1111-111111111111","name":"ci","slug":"ci","status":"active","key_id":"k-1","token_url":"http://x/token"}`
	_, run := againstNotNow(t, notNow{201, "", created})
	dir := t.TempDir()
	code, stdout, stderr := run("", "sa", "create", "--project", "11111111-1111-1111-1111-111111111111", "--name", "ci", "--slug", "ci",
		"--key-file", filepath.Join(dir, "ci.json"), "-o", "json")
	if code == exitOK || !strings.Contains(stderr, "gpuaas sa rotate-key sa-1") || !strings.Contains(stdout, `"sa-1"`) {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}
