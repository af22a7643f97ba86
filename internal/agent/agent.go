// Package agent is the gpuaas node agent: it joins the control plane once
// with a bootstrap token, keeps a node key, mints short-lived node tokens,
// heartbeats with its inventory and the gpuaas workloads it finds, long-polls
// its task queue and executes tasks on the local Docker engine. It only ever
// connects out.
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/agent/driver"
	"github.com/gpuaas/gpuaas/internal/agent/engine"
	"github.com/gpuaas/gpuaas/internal/agent/inventory"
	"github.com/gpuaas/gpuaas/internal/worker"
)

// Config configures an Agent.
type Config struct {
	Server    string // API base URL
	JoinToken string // used once, on first start
	DataDir   string
	Name      string // node name; the hostname when empty
	// HostAddress is where workload ports are published (127.0.0.1 by default).
	HostAddress string
	// AdvertiseAddress is how operators reach this host for ssh -L tunnels
	// to those ports (the hostname when empty). The server never connects in.
	AdvertiseAddress string
	// OrphanGrace is how long a labelled container of no known task, or a
	// network or volume of a Compose project with no container left, may
	// live before the agent removes it (default 10 minutes).
	OrphanGrace time.Duration
	// ImagePruneGrace is how long an image the agent pulled may stay unused
	// by every container (its instances decommissioned) before the agent
	// removes it (default DefaultImagePruneGrace).
	ImagePruneGrace time.Duration
	// ImageHoldMax bounds how long an image pulled for a run is held from
	// the pruner while the run has not created its container (default
	// DefaultImageHoldMax).
	ImageHoldMax time.Duration
	// PollWait is the long-poll wait in seconds (default 60, the server's
	// longest): a queued task wakes the poll at once, so an idle agent
	// costs the control plane one look a minute.
	PollWait int
	// Concurrency is how many tasks run at once (default 4); the tasks of
	// one instance always run one at a time, in order.
	Concurrency int
	Version     string
	Logger      *slog.Logger
	// Driver starts the engine driver tasks run on (engine.New, the local
	// Docker engine, when nil).
	Driver driver.New
	// ResultRetention is how long a finished task's stored result is kept
	// (default DefaultResultRetention); ResultsKept bounds how many are
	// (default DefaultResultsKept). The record of a task whose workload
	// still runs is always kept.
	ResultRetention time.Duration
	ResultsKept     int
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// NVIDIA reads the NVIDIA driver and GPUs for the inventory
	// (inventory.ReadNVIDIA, nvidia-smi from PATH, when nil).
	NVIDIA func(context.Context) (inventory.NVIDIA, error)
}

// DefaultImagePruneGrace is how long a pulled image no container uses stays.
const DefaultImagePruneGrace = 5 * time.Minute

// How long and how many stored task results an agent keeps by default: the
// server re-delivers a task only until it holds its result, so a week is
// far past any redelivery.
const (
	DefaultResultRetention = 7 * 24 * time.Hour
	DefaultResultsKept     = 10000
)

// Agent is one running node agent.
type Agent struct {
	cfg     Config
	log     *slog.Logger
	api     *client.Client
	id      identity
	tok     *tokens
	drv     driver.Driver
	results results
	started results         // tasks begun: their containers are not orphans
	holds   *holds          // images pulled for runs that have not created their containers
	conns   *http.Transport // the agent's own connections, closed at Stop
	lock    *os.File        // the data dir's lock, held while the agent lives

	mu        sync.Mutex
	invDigest string // digest the server holds
	interval  time.Duration
	pollFails int
	inv       nodeapi.Inventory
	invAt     time.Time
	lastBeat  time.Time

	executed atomic.Int64 // tasks executed (not re-reported) by this process

	// wait, when set, replaces sleep's timer (tests move a manual clock).
	wait func(ctx context.Context, d time.Duration) bool

	tasks     *runner
	stopTasks context.CancelFunc
	tasksCtx  context.Context

	beat, poll, reconcile *worker.Periodic
	group                 worker.Group
	joined                chan struct{}
}

// New checks the configuration and prepares the data dir; Start joins (first
// time) and runs the loops.
func New(cfg Config) (*Agent, error) {
	if cfg.Server == "" || cfg.DataDir == "" {
		return nil, errors.New("the agent needs --server and --data-dir")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Name == "" {
		cfg.Name, _ = os.Hostname()
	}
	if cfg.OrphanGrace <= 0 {
		cfg.OrphanGrace = 10 * time.Minute
	}
	if cfg.ImagePruneGrace <= 0 {
		cfg.ImagePruneGrace = DefaultImagePruneGrace
	}
	if cfg.ImageHoldMax <= 0 {
		cfg.ImageHoldMax = DefaultImageHoldMax
	}
	if cfg.PollWait <= 0 {
		cfg.PollWait = 60
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if cfg.ResultRetention <= 0 {
		cfg.ResultRetention = DefaultResultRetention
	}
	if cfg.ResultsKept <= 0 {
		cfg.ResultsKept = DefaultResultsKept
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	dir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	cfg.DataDir = dir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	lock, err := lockDataDir(dir)
	if err != nil {
		return nil, err
	}
	for _, d := range []string{filepath.Join(dir, "tasks"), filepath.Join(dir, "started")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			_ = lock.Close()
			return nil, fmt.Errorf("data dir: %w", err)
		}
	}
	a := &Agent{cfg: cfg, log: cfg.Logger.With("component", "agent"), results: results{filepath.Join(dir, "tasks")},
		started: results{filepath.Join(dir, "started")}, lock: lock, interval: 10 * time.Second, joined: make(chan struct{})}
	a.holds = &holds{path: filepath.Join(dir, holdsFile), max: cfg.ImageHoldMax, now: cfg.Now, log: a.log}
	a.conns = http.DefaultTransport.(*http.Transport).Clone()
	a.api = client.New(cfg.Server, "")
	a.api.UserAgent = "gpuaas-agent/" + cfg.Version
	a.api.HTTP = &http.Client{Timeout: time.Duration(cfg.PollWait+30) * time.Second, Transport: a.conns}
	newDriver := cfg.Driver
	if newDriver == nil {
		newDriver = engine.New
	}
	if a.drv, err = newDriver(driver.Config{HostAddress: cfg.HostAddress, DataDir: dir, Logger: a.log, Unwrap: a.unwrap,
		Known: a.known, Held: a.holds.Held, RemoveUnheld: a.holds.RemoveUnheld, OrphanGrace: cfg.OrphanGrace, ImagePruneGrace: cfg.ImagePruneGrace}); err != nil {
		_ = lock.Close()
		return nil, fmt.Errorf("driver: %w", err)
	}
	return a, nil
}

// NodeID is the node this agent is (empty before it joined).
func (a *Agent) NodeID() string { return a.id.NodeID }

// known reports whether a labelled workload belongs to a task this agent
// began or finished (others are orphans).
func (a *Agent) known(w nodeapi.Workload) bool {
	return w.TaskID != "" && (a.started.Has(w.TaskID) || a.results.Has(w.TaskID))
}

// Start loads or creates the node identity (joining once when there is
// none), reconciles what runs and starts the loops.
func (a *Agent) Start(ctx context.Context) error {
	priv, pub, err := loadOrCreateKey(a.cfg.DataDir)
	if err != nil {
		return err
	}
	id, ok, err := loadIdentity(a.cfg.DataDir)
	var damaged *damagedIdentity
	if errors.As(err, &damaged) {
		id, ok, err = a.recoverIdentity(ctx, damaged, priv)
	}
	if err != nil {
		return err
	}
	if !ok {
		if a.cfg.JoinToken == "" {
			return errors.New("this data dir holds no node identity: pass --join-token to join")
		}
		inv := a.inventory(ctx)
		r, err := a.join(ctx, nodeapi.JoinRequest{JoinToken: a.cfg.JoinToken, Name: a.cfg.Name, PublicKeyPEM: pub, Inventory: inv})
		if err != nil {
			return fmt.Errorf("join: %w", err)
		}
		id = identity{NodeID: r.NodeID, KeyID: r.KeyID, TokenURL: r.TokenURL, Server: a.cfg.Server}
		if err := saveIdentity(a.cfg.DataDir, id); err != nil {
			return fmt.Errorf("save node identity: %w", err)
		}
		a.invDigest = r.InventoryDigest
		a.log.InfoContext(ctx, "joined", "node_id", id.NodeID)
	}
	id.priv = priv
	a.id = id
	tokAPI := client.New(a.cfg.Server, "")
	tokAPI.HTTP.Transport = a.conns
	a.tok = &tokens{api: tokAPI, id: &a.id}
	a.drv.SetNodeID(id.NodeID)
	a.beat = &worker.Periodic{Name: "agent-heartbeat", Interval: time.Second, Timeout: 30 * time.Second, Logger: a.log, Run: a.heartbeat}
	a.poll = &worker.Periodic{Name: "agent-tasks", Interval: 10 * time.Millisecond, Jitter: 0.5, Timeout: 24 * time.Hour, Logger: a.log, Run: a.pollOnce}
	a.reconcile = &worker.Periodic{Name: "agent-reconcile", Interval: max(min(a.cfg.OrphanGrace, a.cfg.ImagePruneGrace)/4, time.Second), Timeout: time.Minute, Logger: a.log, Run: a.reconcileOnce}
	a.group = worker.Group{a.reconcile, a.beat, a.poll}
	a.tasks = newRunner(a.cfg.Concurrency, a.handle)
	a.tasksCtx, a.stopTasks = context.WithCancel(ctx)
	return a.group.Start(ctx)
}

// How a join is retried: joinAttempts tries at most, waiting joinBackoff
// after the first failure, twice as long after each next one, at most
// joinMaxBackoff (two minutes at most in all, well inside a join token's
// life).
const (
	joinAttempts   = 10
	joinBackoff    = 500 * time.Millisecond
	joinMaxBackoff = 30 * time.Second
)

// join asks the server to join, again after a failure that may not be a
// refusal: an answer lost on the way (a cut connection, a proxy's 502) may
// follow a join the server committed, and the server answers a repeat of
// the same token and key with that same node. A refusal (4xx) is final.
func (a *Agent) join(ctx context.Context, in nodeapi.JoinRequest) (nodeapi.JoinResponse, error) {
	wait := joinBackoff
	for attempt := 1; ; attempt++ {
		r, err := a.api.JoinNode(ctx, in)
		if err == nil || attempt == joinAttempts || !retryableJoin(err) || ctx.Err() != nil {
			return r, err
		}
		d := wait/2 + rand.N(wait/2+1) // jittered: agents cut off together do not come back together
		a.log.WarnContext(ctx, "join failed; trying again", "err", err, "attempt", attempt, "retry_in", d)
		select {
		case <-ctx.Done():
			return r, err
		case <-time.After(d):
		}
		wait = min(2*wait, joinMaxBackoff)
	}
}

// retryableJoin reports whether a failed join may succeed when asked again:
// a transport error (no answer, or a cut one), a 5xx, 408 or 429.
func retryableJoin(err error) bool {
	var ae *client.APIError
	if errors.As(err, &ae) {
		return ae.Status >= 500 || ae.Status == http.StatusRequestTimeout || ae.Status == http.StatusTooManyRequests
	}
	return true
}

// Stop ends the loops and the tasks in flight (their leases run out and
// the server delivers them again), closes the agent's connections and
// releases the data dir; running workloads keep running. Call it after a
// failed Start too.
func (a *Agent) Stop() {
	a.group.Stop()
	if a.stopTasks != nil {
		a.stopTasks()
		a.tasks.Wait()
	}
	// Its concurrent requests (beats, polls, results) can leave a
	// connection dialled and never used, which a server counts busy for 5
	// seconds in its graceful shutdown: close the idle ones, and (no
	// request follows) those whose dial completes later.
	a.conns.CloseIdleConnections()
	if a.drv != nil {
		a.drv.Close()
		a.drv = nil
	}
	if a.lock != nil {
		_ = a.lock.Truncate(0)
		a.lock.Close()
		a.lock = nil
	}
}

// Heartbeats is a test hook: the number of heartbeat runs so far.
func (a *Agent) Heartbeats() *worker.Periodic { return a.beat }

func (a *Agent) inventory(ctx context.Context) nodeapi.Inventory {
	return inventory.Collect(ctx, inventory.Options{DiskPath: a.cfg.DataDir, AgentVersion: a.cfg.Version, Address: a.cfg.AdvertiseAddress,
		NVIDIA: a.cfg.NVIDIA, Engine: func(ctx context.Context) (inventory.Engine, error) {
			e, err := a.drv.Engine(ctx)
			return inventory.Engine{Version: e.Version, APIVersion: e.APIVersion, Runtimes: e.Runtimes}, err
		}})
}

// inventoryEvery is how often the inventory is read again (nvidia-smi and
// the engine are asked); heartbeats in between reuse the last reading.
const inventoryEvery = time.Minute

func (a *Agent) cachedInventory(ctx context.Context) nodeapi.Inventory {
	a.mu.Lock()
	if time.Since(a.invAt) < inventoryEvery {
		inv := a.inv
		a.mu.Unlock()
		return inv
	}
	a.mu.Unlock()
	inv := a.inventory(ctx)
	a.mu.Lock()
	a.inv, a.invAt = inv, time.Now()
	a.mu.Unlock()
	return inv
}

// authed returns an API client carrying a fresh node token.
func (a *Agent) authed(ctx context.Context) (*client.Client, error) {
	t, err := a.tok.Get(ctx)
	if err != nil {
		return nil, err
	}
	c := *a.api
	c.Token = t
	return &c, nil
}

// refused drops the node token when the server says it is no longer valid.
func (a *Agent) refused(err error) {
	if unauthorized(err) {
		a.tok.Drop()
	}
}

// unauthorized reports whether err is the server's 401: it refused the
// caller's token.
func unauthorized(err error) bool {
	var ae *client.APIError
	return errors.As(err, &ae) && ae.Status == http.StatusUnauthorized
}

// unwrap exchanges a pull's wrapping token for its credentials. Only a
// refusal of the token or of the node (409 wrapping_token_invalid: unknown,
// expired or used; 403, 404, 422; a node token exchange refused) is
// returned as it came, which the driver reports as credential_refused. A
// 401 refuses the node's access token, not the wrapping token: the control
// plane authenticates the caller before it looks at the wrapping token, so
// the 401 spent nothing. The token may have been cut short (the control
// plane's keys rotated, a clock skewed), so the same wrapping token goes
// again at once with a newly exchanged node token; a second 401 in a row
// is the refusal (credential_refused, saying what to check). An answer
// that says the control plane was busy is not a refusal, and the same
// token goes again:
//   - 429 unwrap_rate_limited (this node's principal unwrapped more than the
//     server takes) consumed nothing; the next try waits the Retry-After;
//   - 502, 503 (the server's unavailable: its database down, say) and 504,
//     and a request that got no answer at all (connection refused or
//     reset: the control plane restarting), wait the Retry-After when one
//     came, else a back-off from unwrapBackoff doubling to unwrapMaxBackoff.
//
// A burst of pulls, or a control plane restart, is then spread over time,
// not failed. Only when unwrapPatience (or the task's context) runs out is
// the pull failed, as image_pull_failed, not credential_refused: nothing
// was refused, and a person reading the reason would hunt for a credential
// fault that is not there; a pull failure is the one a later try mends.
func (a *Agent) unwrap(ctx context.Context, wrapping string) (driver.Credentials, error) {
	deadline := a.cfg.Now().Add(unwrapPatience)
	backoff := unwrapBackoff
	// unanswered is the last busy answer after which the control plane may
	// have unwrapped the token all the same (only a 429 surely did not).
	var unanswered error
	// reauthed says the last try was answered 401, so this one went with a
	// newly exchanged node token.
	reauthed := false
	for try := 1; ; try++ {
		cr, sent, err := a.unwrapOnce(ctx, wrapping)
		if err == nil {
			return cr, nil
		}
		if ctx.Err() != nil {
			return driver.Credentials{}, driver.Fail(nodeapi.ReasonImagePullFailed,
				"the task ended while unwrapping this pull's credentials (%d tries; last: %v)", try, err)
		}
		// A 401 is never counted in unanswered: the server refused the
		// node's token before it looked at the wrapping token.
		if sent && unauthorized(err) {
			if !reauthed {
				// unwrapOnce dropped the refused node token: the next try
				// exchanges a new one, and waits for nothing.
				reauthed = true
				a.log.WarnContext(ctx, "unwrap refused the node's token; trying once more with a new one", "try", try, "err", err)
				continue
			}
			return driver.Credentials{}, driver.Fail(nodeapi.ReasonCredentialRefused,
				"the control plane refused this node's identity twice in a row while unwrapping this pull's credentials, "+
					"the second time with a newly exchanged node token (%v): the control plane's replicas may not share their token "+
					"signing keys, or its clock and this host's may disagree; also check that node %s is not removed (gpuaas node get %[2]s): "+
					"a removed node joins again with a new join token (gpuaas node join-token)", err, a.id.NodeID)
		}
		reauthed = false
		busy := unwrapBusy(err)
		if busy == "" {
			var ae *client.APIError
			if unanswered != nil && errors.As(err, &ae) && ae.Status == http.StatusConflict {
				// The token unwraps once, and a try that got no answer may
				// have been the one: a token refused after it says nothing
				// about the credential.
				return driver.Credentials{}, driver.Fail(nodeapi.ReasonImagePullFailed,
					"the control plane refused this pull's wrapping token (%v) after an earlier try got no answer (%v): "+
						"that try may have used it (a token unwraps once); the task can be retried", err, unanswered)
			}
			if errors.As(err, &ae) && ae.Status >= 500 {
				// The control plane failed, which refuses nothing; it may
				// have spent the token first, so it is not sent again.
				return driver.Credentials{}, driver.Fail(nodeapi.ReasonImagePullFailed,
					"the control plane failed while unwrapping this pull's credentials (%v); nothing was refused: the task can be retried", err)
			}
			return driver.Credentials{}, err
		}
		if ae := (*client.APIError)(nil); sent && (!errors.As(err, &ae) || ae.Status != http.StatusTooManyRequests) {
			unanswered = err
		}
		wait := retryAfter(err)
		if wait <= 0 {
			wait, backoff = backoff, min(2*backoff, unwrapMaxBackoff)
		}
		// A little jitter, so that the pulls of one burst do not come back
		// together.
		wait += time.Duration(rand.IntN(250)) * time.Millisecond
		left := deadline.Sub(a.cfg.Now())
		if left <= 0 {
			msg := fmt.Sprintf("the control plane %s for %d tries over %v while this pull unwrapped its credentials (last: %v); "+
				"nothing was refused: the task can be retried", busy, try, unwrapPatience, err)
			if busy == unwrapRateLimited {
				msg += ", or the control plane's --unwrap-rate raised"
			}
			return driver.Credentials{}, driver.Fail(nodeapi.ReasonImagePullFailed, "%s", msg)
		}
		// A wait that would end past the patience is cut to what is left,
		// and one last try goes then: a limit or an outage may have ended
		// sooner than the server guessed, while going on past the patience
		// would risk the wrapping token's life (see unwrapPatience), and
		// stopping at once would give up a try the patience still has room
		// for.
		wait = min(wait, left)
		a.log.WarnContext(ctx, "unwrap answered busy; trying again", "busy", busy, "wait", wait, "try", try, "err", err)
		if !a.sleep(ctx, wait) {
			return driver.Credentials{}, driver.Fail(nodeapi.ReasonImagePullFailed,
				"the task ended while waiting to unwrap this pull's credentials again: the control plane %s (%d tries; last: %v)", busy, try, err)
		}
	}
}

// unwrapOnce asks the control plane once, with a fresh node token. sent
// says whether the unwrap itself went out (not when getting the node's
// token failed first): only a try that sent the wrapping token may have
// spent it.
func (a *Agent) unwrapOnce(ctx context.Context, wrapping string) (cr driver.Credentials, sent bool, err error) {
	c, err := a.authed(ctx)
	if err != nil {
		return driver.Credentials{}, false, err
	}
	got, err := c.Unwrap(ctx, wrapping)
	if err != nil {
		a.refused(err)
		return driver.Credentials{}, true, err
	}
	return driver.Credentials{Username: got.Username, Password: got.Password, Registry: got.Registry}, true, nil
}

const unwrapRateLimited = "kept refusing for its rate limit"

// unwrapBusy says how the control plane was busy when err is an answer
// that asks for a later try (or no answer at all), or "" when err is a
// refusal: the unwrap handler answers a refused token 409, an unknown or
// unauthorised caller 401 (tried once more by unwrap itself), 403 or 404,
// a malformed request 422, and those stay refusals. A 500 is not tried again either (it is no sign the
// control plane will answer otherwise later), but unwrap fails it
// image_pull_failed: nothing was refused.
func unwrapBusy(err error) string {
	var ae *client.APIError
	if errors.As(err, &ae) {
		switch ae.Status {
		case http.StatusTooManyRequests:
			return unwrapRateLimited
		case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return fmt.Sprintf("was unavailable (HTTP %d)", ae.Status)
		}
		return ""
	}
	// No answer came: the request did not reach the control plane, or its
	// answer was cut off.
	var ue *url.Error
	var ne net.Error
	if errors.As(err, &ue) || errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "could not be reached"
	}
	return ""
}

// unwrapPatience bounds how long one unwrap waits out busy answers: well
// inside a wrapping token's life (5 minutes at most, counted from when the
// control plane queued the task), so the last try still carries a live
// token.
const unwrapPatience = 2 * time.Minute

// unwrapBackoff and unwrapMaxBackoff pace the tries after busy answers
// that carry no Retry-After: a restarting control plane is asked again
// soon, a longer outage every 15 seconds.
const (
	unwrapBackoff    = time.Second
	unwrapMaxBackoff = 15 * time.Second
)

// sleep waits d, or until ctx ends (false). Tests replace it (a.wait) to
// move a manual clock instead of sleeping.
func (a *Agent) sleep(ctx context.Context, d time.Duration) bool {
	if a.wait != nil {
		return a.wait(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// heartbeat runs every second and beats when the server's interval has
// passed; it sends the inventory only when its digest differs from the one
// the server holds.
func (a *Agent) heartbeat(ctx context.Context) error {
	a.mu.Lock()
	due := time.Since(a.lastBeat) >= a.interval
	a.mu.Unlock()
	if !due {
		return nil
	}
	ws, err := a.drv.Workloads(ctx)
	if err != nil {
		// A beat tells the control plane what runs here, and it acts on
		// that: a workload missing from the report is taken for gone. An
		// agent that cannot ask its engine does not know, so it does not
		// beat. An outage shorter than TTL + grace passes between two
		// beats unnoticed; a longer one is the node down (its allocations
		// lost), not every workload on it reported gone.
		a.backoff()
		return fmt.Errorf("heartbeat: list the engine's workloads: %w", err)
	}
	hb := nodeapi.Heartbeat{Workloads: ws}
	if hb.Workloads == nil {
		hb.Workloads = []nodeapi.Workload{}
	}
	inv := a.cachedInventory(ctx)
	_, digest, err := inv.Canonical()
	if err != nil {
		return err
	}
	a.mu.Lock()
	if digest != a.invDigest {
		hb.Inventory = &inv
	}
	a.mu.Unlock()
	c, err := a.authed(ctx)
	if err != nil {
		a.backoff()
		return err
	}
	r, err := c.NodeHeartbeat(ctx, a.id.NodeID, hb)
	if err != nil {
		a.refused(err)
		a.backoff()
		if d := retryAfter(err); d > 0 {
			a.mu.Lock()
			a.lastBeat = time.Now().Add(-a.interval + d) // not before the server asked
			a.mu.Unlock()
		}
		return err
	}
	a.mu.Lock()
	a.invDigest = r.InventoryDigest
	if r.HeartbeatInterval > 0 {
		a.interval = time.Duration(r.HeartbeatInterval) * time.Second
	}
	a.lastBeat = time.Now()
	a.mu.Unlock()
	return nil
}

// backoff delays the next heartbeat by a jittered fraction of the interval
// while the server is unreachable.
func (a *Agent) backoff() {
	a.mu.Lock()
	a.lastBeat = time.Now().Add(-a.interval + time.Duration(500+rand.IntN(1500))*time.Millisecond)
	a.mu.Unlock()
}

// pollOnce long-polls for tasks and hands what arrives to the runner
// (bounded concurrency, one task of an instance at a time). On errors it
// waits a jittered, growing back-off so a restarting server is not hammered.
func (a *Agent) pollOnce(ctx context.Context) error {
	c, err := a.authed(ctx)
	if err == nil {
		var tasks []nodeapi.Task
		tasks, err = c.PollNodeTasks(ctx, a.id.NodeID, a.cfg.PollWait)
		if err == nil {
			a.pollFails = 0
			for _, t := range tasks {
				a.tasks.Submit(a.tasksCtx, t)
			}
			return nil
		}
		a.refused(err)
	}
	if ctx.Err() != nil {
		return nil
	}
	a.pollFails++
	d := pollBackoff(a.pollFails, err)
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	return err
}

// pollBackoff is how long a poll waits after its fails-th failure in a
// row: a jittered, growing back-off, and never less than a refusal's
// Retry-After (a 429 from a server that limits this node's polls).
func pollBackoff(fails int, err error) time.Duration {
	d := min(time.Duration(1<<min(fails, 5))*250*time.Millisecond, 10*time.Second)
	d = d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
	return max(d, retryAfter(err))
}

// retryAfter is how long the server asked the agent to wait before the
// next request like the one that failed with err (a 429's or 503's
// Retry-After), or 0. It is capped, so a wrong header cannot silence an
// agent for long.
func retryAfter(err error) time.Duration {
	var ae *client.APIError
	if !errors.As(err, &ae) || (ae.Status != http.StatusTooManyRequests && ae.Status != http.StatusServiceUnavailable) {
		return 0
	}
	return min(ae.RetryAfter, maxRetryAfter)
}

// maxRetryAfter caps the wait a Retry-After can impose: a heartbeat held
// back longer would let the node be taken for down.
const maxRetryAfter = time.Minute

// reconcileOnce removes orphans (containers, and the networks and volumes
// of Compose projects) past their grace and images of
// decommissioned instances past theirs.
func (a *Agent) reconcileOnce(ctx context.Context) error {
	for _, h := range a.holds.Expire() {
		a.log.WarnContext(ctx, "an image pulled for a run was held for the longest hold and no run came; the pruner may remove it", "image", h.Ref, "instance_id", h.InstanceID, "held_since", h.Since)
	}
	res, err := a.drv.Housekeep(ctx)
	for _, w := range res.Removed {
		a.log.InfoContext(ctx, "orphan removed", "container_id", w.ContainerID, "task_id", w.TaskID, "instance_id", w.InstanceID)
	}
	// Heartbeats report containers only, so these need no early beat.
	for _, n := range res.RemovedNetworks {
		a.log.InfoContext(ctx, "orphan network removed", "network", n)
	}
	for _, v := range res.RemovedVolumes {
		a.log.InfoContext(ctx, "orphan volume removed", "volume", v)
	}
	if len(res.Removed) > 0 {
		a.mu.Lock()
		a.lastBeat = time.Time{} // report the change at once
		a.mu.Unlock()
	}
	return errors.Join(err, a.pruneRecords(ctx))
}

// pruneRecords drops stored task records past their retention, keeping
// those of the tasks whose workloads still run (without a record, those
// would be orphans).
func (a *Agent) pruneRecords(ctx context.Context) error {
	ws, err := a.drv.Workloads(ctx)
	if err != nil {
		return fmt.Errorf("prune task records: list workloads: %w", err)
	}
	live := map[string]bool{}
	for _, w := range ws {
		live[w.TaskID] = true
	}
	now := a.cfg.Now()
	n, err := a.results.Prune(now, a.cfg.ResultsKept, a.cfg.ResultRetention, live)
	if err != nil {
		return fmt.Errorf("prune task results: %w", err)
	}
	// A started record outlives its task only when the agent stopped
	// mid-task; the server has re-delivered or abandoned that task since.
	m, err := a.started.Prune(now, a.cfg.ResultsKept, a.cfg.ResultRetention, live)
	if err != nil {
		return fmt.Errorf("prune started records: %w", err)
	}
	if n+m > 0 {
		a.log.InfoContext(ctx, "pruned task records", "results", n, "started", m)
	}
	return nil
}

// The bounds the server puts on a task result (nodes.ReportResult and the
// API's body limit). A result past them is refused, and since the agent
// re-sends the stored result at every redelivery, refused again: the task
// would never complete. What a result carries from untrusted sources — the
// workload's log lines above all, the engine's messages — is cut to fit.
const (
	maxResultMessage = 4 << 10  // bytes of message
	maxLogLines      = 50       // lines of log_tail
	maxLogLineBytes  = 1 << 10  // bytes of one log line
	maxLogTailJSON   = 16 << 10 // bytes of log_tail as JSON (escapes count)
	maxResultOutput  = 64 << 10 // bytes of output
)

// trimLog keeps the last lines of a log tail that fit a result: at most
// maxLogLines, each cut to maxLogLineBytes, and no more than maxLogTailJSON
// once encoded (a line of control bytes encodes six times its length).
func trimLog(lines []string) []string {
	if len(lines) > maxLogLines {
		lines = lines[len(lines)-maxLogLines:]
	}
	out := make([]string, len(lines))
	size := 2 // []
	keep := len(lines)
	for i := len(lines) - 1; i >= 0; i-- {
		out[i] = truncate(lines[i], maxLogLineBytes)
		b, _ := json.Marshal(out[i])
		if size += len(b) + 1; size > maxLogTailJSON {
			break
		}
		keep = i
	}
	if len(lines) == 0 {
		return lines
	}
	return out[keep:]
}

// truncate cuts s to at most n bytes without splitting a UTF-8 sequence.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	// Drop the start of a character the cut split (at most UTFMax-1 bytes).
	for range utf8.UTFMax - 1 {
		if r, size := utf8.DecodeLastRuneInString(s); r != utf8.RuneError || size != 1 {
			break
		}
		s = s[:len(s)-1]
	}
	return s
}

// fitResult bounds a result to what the server accepts (see above).
func fitResult(r nodeapi.TaskResult) nodeapi.TaskResult {
	r.Message = truncate(r.Message, maxResultMessage)
	if r.LogTail != nil {
		r.LogTail = trimLog(r.LogTail)
	}
	if len(r.Output) > maxResultOutput {
		return nodeapi.TaskResult{State: nodeapi.ResultFailed, ReasonCode: nodeapi.ReasonInternal,
			Message: fmt.Sprintf("the task's output is %d bytes, more than a result carries (%d)", len(r.Output), maxResultOutput)}
	}
	return r
}
