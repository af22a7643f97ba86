package main

// Usage reporting with the instance's own identity.
//
// The platform mounts a service-account key into every instance
// (GPUAAS_IDENTITY_FILE) that is good for this instance only. The app signs
// a short JWT assertion with it, trades the assertion for an access token at
// the key's token_url, renews the token before it runs out, and posts its
// usage as CloudEvents to the instance's usage endpoint. Each report has an
// id fixed when the report is cut and kept across retries, so a report that
// reached the platform before a timeout is counted once. When the platform
// answers 429 or 503 with Retry-After, the report is kept and sent again no
// sooner than that (at most a minute later); the wait holds across the
// flushes while the process runs. The flush at the stop has a deadline: a
// wait that would run past it is not begun. The report goes at once instead
// (the limit may have refilled; the id makes a repeat harmless), and what is
// still not taken when the tries no longer fit is lost with the process,
// which logs "usage not reported before exit".
//
// The same identity sends the instance's heartbeat (a runtime event) on the
// same schedule, so the platform knows the app is alive: the manifest's
// health.heartbeat_timeout_seconds says how late one may be before the
// instance is marked degraded.
//
// Outside the platform (no identity file) reporting is off and Add is free.
// With access to the gpuaas Go module, client.ServiceAccountSession does the
// token half of this for you; this file keeps the app free of dependencies.

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

type keyFile struct {
	ServiceAccountID string `json:"service_account_id"`
	ProjectID        string `json:"project_id"`
	KeyID            string `json:"key_id"`
	PrivateKeyPEM    string `json:"private_key_pem"`
	TokenURL         string `json:"token_url"`
	APIBaseURL       string `json:"api_base_url"`
}

type usageReporter struct {
	log      *slog.Logger
	enabled  bool
	unit     string // the manifest's metering.kind
	key      keyFile
	signer   crypto.Signer
	alg      string
	base     string // the API, as the platform told this instance to reach it
	url      string // the instance's usage endpoint
	events   string // the instance's runtime-events endpoint
	source   string
	idPrefix string
	interval time.Duration
	http     *http.Client

	pending atomic.Int64 // counted, not yet cut into a report

	report    sync.Mutex // one report in flight at a time; guards cut to notBefore
	cut       *usageEvent
	seq       int
	since     time.Time
	notBefore time.Time // the platform's Retry-After: no report goes before it

	mu        sync.Mutex // guards the token and the heartbeats' state
	beats     int
	beatAfter time.Time // the platform's Retry-After for runtime events
	token     string
	renewAt   time.Time
}

// maxRetryAfter caps the wait a Retry-After can impose, so a wrong header
// cannot silence the app for long.
const maxRetryAfter = time.Minute

type usageEvent struct {
	SpecVersion     string    `json:"specversion"`
	ID              string    `json:"id"`
	Source          string    `json:"source"`
	Type            string    `json:"type"`
	Subject         string    `json:"subject"`
	Time            time.Time `json:"time"`
	DataContentType string    `json:"datacontenttype"`
	Data            struct {
		UsageUnit string    `json:"usage_unit"`
		Quantity  int64     `json:"quantity"`
		StartTime time.Time `json:"start_time"`
	} `json:"data"`
}

// newUsageReporter reports in unit, which must equal the manifest's
// metering.kind.
func newUsageReporter(log *slog.Logger, unit string) (*usageReporter, error) {
	r := &usageReporter{log: log, unit: unit, interval: 10 * time.Second, since: time.Now().UTC(), http: &http.Client{Timeout: 15 * time.Second}}
	path := os.Getenv("GPUAAS_IDENTITY_FILE")
	instance := os.Getenv("GPUAAS_APP_INSTANCE_ID")
	if path == "" || instance == "" {
		return r, nil // not running on the platform
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the instance identity: %w", err)
	}
	if err := json.Unmarshal(raw, &r.key); err != nil {
		return nil, fmt.Errorf("the instance identity %s is not a key file: %w", path, err)
	}
	if r.signer, r.alg, err = parseKey(r.key.PrivateKeyPEM); err != nil {
		return nil, fmt.Errorf("the instance identity %s: %w", path, err)
	}
	base := os.Getenv("GPUAAS_API_BASE_URL")
	if base == "" {
		base = r.key.APIBaseURL
	}
	project := os.Getenv("GPUAAS_PROJECT_ID")
	if project == "" {
		project = r.key.ProjectID
	}
	if d, err := time.ParseDuration(os.Getenv("USAGE_INTERVAL")); err == nil && d > 0 {
		r.interval = d
	}
	r.enabled, r.base = true, base
	r.url = base + "/api/v1/projects/" + project + "/app-instances/" + instance + "/usage"
	r.events = base + "/api/v1/projects/" + project + "/app-instances/" + instance + "/runtime-events"
	r.source = "//gpuaas/app-instances/" + instance
	// Unique per process: a restarted container starts a new series.
	r.idPrefix = fmt.Sprintf("%s-%d", instance, time.Now().UnixNano())
	return r, nil
}

func (r *usageReporter) Enabled() bool { return r.enabled }

// Add counts n units of use.
func (r *usageReporter) Add(n int64) {
	if r.enabled {
		r.pending.Add(n)
	}
}

// Run sends a heartbeat at once and then reports usage and a heartbeat
// every interval until ctx ends.
func (r *usageReporter) Run(ctx context.Context) {
	if !r.enabled {
		return
	}
	// The heartbeats go on their own: a report waiting out a Retry-After
	// (up to a minute, each try) must not hold back the beats that keep the
	// instance from being taken for degraded.
	beating := make(chan struct{})
	go func() {
		defer close(beating)
		r.beat(ctx)
		every(ctx, r.interval, func() { r.beat(ctx) })
	}()
	every(ctx, r.interval, func() {
		if err := r.Flush(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("usage report failed; it is kept and retried", "err", err)
		}
	})
	<-beating
}

// every calls f each interval until ctx ends.
func every(ctx context.Context, interval time.Duration, f func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}

// Flush reports what was counted, retrying a report that failed for a
// reason that may pass (network, 5xx, 429) with the same event id. A report
// kept from an earlier failure goes first, then what was counted since.
func (r *usageReporter) Flush(ctx context.Context) error {
	if !r.enabled {
		return nil
	}
	r.report.Lock()
	defer r.report.Unlock()
	if r.cut != nil {
		if err := r.sendCut(ctx); err != nil && r.cut != nil {
			return err // still kept: what was counted since waits behind it
		}
	}
	n := r.pending.Swap(0)
	if n == 0 {
		return nil
	}
	r.seq++
	now := time.Now().UTC()
	ev := &usageEvent{SpecVersion: "1.0", ID: fmt.Sprintf("%s-%d", r.idPrefix, r.seq), Source: r.source,
		Type: "gpuaas.usage.v1", Subject: os.Getenv("GPUAAS_APP_INSTANCE_ID"), Time: now, DataContentType: "application/json"}
	ev.Data.UsageUnit, ev.Data.Quantity, ev.Data.StartTime = r.unit, n, r.since
	r.cut, r.since = ev, now
	return r.sendCut(ctx)
}

// sendCut sends the cut report until it is taken, refused for good, or the
// tries or ctx run out (then it is kept for the next Flush). Between tries
// it backs off, and never for less than the platform's Retry-After, which
// it keeps in notBefore for the next Flush too. The caller holds r.report.
//
// A wait that would end after ctx's deadline is not begun: at the stop
// (a 20 s budget against a Retry-After of up to a minute) it would spend
// the whole budget and send nothing. When the deadline comes before
// notBefore, the report goes once at once instead: the limit may have
// refilled since, and its fixed id makes a repeat harmless.
func (r *usageReporter) sendCut(ctx context.Context) error {
	if !pastDeadline(ctx, r.notBefore) {
		if err := sleepUntil(ctx, r.notBefore); err != nil {
			return fmt.Errorf("usage report %s kept: the platform asked to wait until %s: %w", r.cut.ID, r.notBefore.Format(time.RFC3339), err)
		}
	}
	const tries = 5
	delay := 500 * time.Millisecond
	for attempt := 1; ; attempt++ {
		retry, err := r.Call(ctx, http.MethodPost, r.url, []any{r.cut}, nil)
		if err == nil {
			r.log.Info("usage reported", "id", r.cut.ID, "quantity", r.cut.Data.Quantity)
			r.cut = nil
			return nil
		}
		if !retry {
			r.log.Error("usage report refused; dropped", "id", r.cut.ID, "err", err)
			r.cut = nil
			return err
		}
		wait := delay
		if ra := retryAfter(err); ra > 0 {
			r.notBefore = time.Now().Add(ra)
			wait = max(wait, ra)
		}
		// No wait after the last try: it would hold r.report (and the
		// stop) for nothing.
		if attempt == tries || ctx.Err() != nil {
			return err
		}
		if pastDeadline(ctx, time.Now().Add(wait)) {
			return fmt.Errorf("usage report %s not retried: the next try (in %v) would come after the deadline: %w", r.cut.ID, wait.Round(time.Millisecond), err)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		delay = min(2*delay, 8*time.Second)
	}
}

// pastDeadline says whether t comes after ctx's deadline, if it has one.
func pastDeadline(ctx context.Context, t time.Time) bool {
	d, ok := ctx.Deadline()
	return ok && t.After(d)
}

// sleepUntil waits until t, or for ctx to end (its error).
func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// beat sends one heartbeat. A lost one is not retried: the next comes an
// interval later, well inside the timeout. While the platform's
// Retry-After for runtime events runs, the beat is not sent: it would be
// refused, and would spend what the platform asked the app to save.
func (r *usageReporter) beat(ctx context.Context) {
	r.mu.Lock()
	r.beats++
	n, after := r.beats, r.beatAfter
	r.mu.Unlock()
	if time.Now().Before(after) {
		return
	}
	ev := map[string]any{"specversion": "1.0", "id": fmt.Sprintf("%s-beat-%d", r.idPrefix, n), "source": r.source,
		"type": "heartbeat", "time": time.Now().UTC()}
	_, err := r.Call(ctx, http.MethodPost, r.events, []any{ev}, nil)
	if err != nil && ctx.Err() == nil {
		r.log.Warn("heartbeat failed", "err", err)
	}
	if ra := retryAfter(err); ra > 0 {
		r.mu.Lock()
		r.beatAfter = time.Now().Add(ra)
		r.mu.Unlock()
	}
}

// Call makes one more API call as the instance, with the token the
// reporter keeps, so an app signs in once: in, when there is one, is posted
// as a CloudEvents batch, and the answer is decoded into out, when there is
// one. retry says whether trying again may help (the network, 401, 429,
// 5xx); after a 429 or 503, retryAfter(err) is how long the platform asked
// the app to wait first.
func (r *usageReporter) Call(ctx context.Context, method, url string, in, out any) (retry bool, err error) {
	r.mu.Lock()
	tok, err := r.accessToken(ctx)
	r.mu.Unlock()
	if err != nil {
		return true, err
	}
	retry, refused, err := r.exchange(ctx, tok, method, url, in, out)
	if refused {
		r.mu.Lock()
		if r.token == tok {
			r.token = ""
		}
		r.mu.Unlock()
	}
	return retry, err
}

// exchange is one HTTP call with tok; refused says the API did not take
// the token.
func (r *usageReporter) exchange(ctx context.Context, tok, method, url string, in, out any) (retry, refused bool, err error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return false, false, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return false, false, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/cloudevents-batch+json")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "cluster-app/"+version)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := r.http.Do(req)
	if err != nil {
		return true, false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		if out == nil {
			return false, false, nil
		}
		return false, false, json.NewDecoder(resp.Body).Decode(out)
	}
	err = answerError(method+" "+url, resp)
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		return true, true, err
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return true, false, err
	default:
		return false, false, err
	}
}

// apiError is an answer other than 2xx. wait is what its Retry-After asked
// (a 429 or 503), capped at maxRetryAfter.
type apiError struct {
	msg  string
	wait time.Duration
}

func (e *apiError) Error() string { return e.msg }

// answerError reads the refusal resp of what into an *apiError.
func answerError(what string, resp *http.Response) error {
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	e := &apiError{msg: fmt.Sprintf("%s: %s: %s", what, resp.Status, bytes.TrimSpace(msg))}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		e.wait = min(parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()), maxRetryAfter)
	}
	return e
}

// retryAfter is how long the platform asked the app to wait before trying
// again what failed with err, or 0.
func retryAfter(err error) time.Duration {
	var e *apiError
	if errors.As(err, &e) {
		return e.wait
	}
	return 0
}

// parseRetryAfter reads a Retry-After header: delay seconds or an HTTP
// date (RFC 9110); 0 when absent or unreadable.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if s, err := strconv.Atoi(v); err == nil {
		return max(time.Duration(s)*time.Second, 0)
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0)
	}
	return 0
}

// accessToken returns a token with time to spare, trading a fresh signed
// assertion for one when the last is three quarters through its life.
func (r *usageReporter) accessToken(ctx context.Context) (string, error) {
	if r.token != "" && time.Now().Before(r.renewAt) {
		return r.token, nil
	}
	assertion, err := r.sign(time.Now())
	if err != nil {
		return "", err
	}
	body, _ := json.Marshal(map[string]string{"grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer", "assertion": assertion})
	// Posted to the API this instance was told to use; token_url is the
	// audience the assertion names, which may be an address the workload
	// cannot reach (the platform's public URL).
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.base+"/api/v1/auth/service-account/token", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var t struct {
		AccessToken string `json:"access_token"`
		ExpiresIn   int    `json:"expires_in"`
	}
	if resp.StatusCode != http.StatusOK {
		return "", answerError("token exchange", resp)
	}
	if err := json.NewDecoder(resp.Body).Decode(&t); err != nil || t.AccessToken == "" {
		return "", fmt.Errorf("token exchange: unreadable answer (%v)", err)
	}
	r.token = t.AccessToken
	r.renewAt = time.Now().Add(time.Duration(t.ExpiresIn) * time.Second * 3 / 4)
	return r.token, nil
}

// sign makes the RFC 7523 assertion: iss and sub are the service account,
// aud the token URL, kid the key; it is good for five minutes.
func (r *usageReporter) sign(now time.Time) (string, error) {
	var jti [16]byte
	_, _ = rand.Read(jti[:])
	header, _ := json.Marshal(map[string]string{"alg": r.alg, "typ": "JWT", "kid": r.key.KeyID})
	claims, _ := json.Marshal(map[string]any{"iss": r.key.ServiceAccountID, "sub": r.key.ServiceAccountID,
		"aud": []string{r.key.TokenURL}, "iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix(), "jti": fmt.Sprintf("%x", jti)})
	b64 := base64.RawURLEncoding
	input := b64.EncodeToString(header) + "." + b64.EncodeToString(claims)
	var sig []byte
	switch k := r.signer.(type) {
	case ed25519.PrivateKey:
		sig = ed25519.Sign(k, []byte(input))
	case *ecdsa.PrivateKey:
		h := sha256.Sum256([]byte(input))
		rr, s, err := ecdsa.Sign(rand.Reader, k, h[:])
		if err != nil {
			return "", err
		}
		sig = make([]byte, 64)
		rr.FillBytes(sig[:32])
		s.FillBytes(sig[32:])
	}
	return input + "." + b64.EncodeToString(sig), nil
}

func parseKey(pemText string) (crypto.Signer, string, error) {
	block, _ := pem.Decode([]byte(pemText))
	if block == nil {
		return nil, "", errors.New("the private key is not PEM")
	}
	var k any
	var err error
	if block.Type == "EC PRIVATE KEY" {
		k, err = x509.ParseECPrivateKey(block.Bytes)
	} else {
		k, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	}
	if err != nil {
		return nil, "", err
	}
	switch k := k.(type) {
	case ed25519.PrivateKey:
		return k, "EdDSA", nil
	case *ecdsa.PrivateKey:
		return k, "ES256", nil
	}
	return nil, "", fmt.Errorf("unsupported key type %T: want Ed25519 or ECDSA P-256", k)
}
