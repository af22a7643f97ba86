// Command external-worker is a reference external worker: it runs the
// lifecycle operations of one app's instances itself, as a Slurm, Ray or
// bare-metal controller would, through the worker contract of the public Go
// client (acquire → heartbeat → complete or fail). Its "runtime" is one
// Docker container per instance, so that what it does can be seen and
// checked. docs/external-workers.md describes the contract.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/gpuaas/gpuaas/client"
	"github.com/moby/moby/api/types/container"
	docker "github.com/moby/moby/client"
)

// The labels of the containers this worker runs. Teardown lists by them, so
// it never touches a container it did not create.
const (
	labelWorker    = "gpuaas.external_worker"
	labelInstance  = "gpuaas.instance_id"
	labelOperation = "gpuaas.operation_id"
	labelMember    = "gpuaas.member_id"
)

var (
	errCancelled = errors.New("the platform cancelled the operation")
	errLeaseLost = errors.New("the lease is no longer ours")
)

type worker struct {
	api    *client.Client
	docker *docker.Client
	app    string
	image  string
	hold   time.Duration
	wait   int
	step   atomic.Value // string: what the current operation is doing, sent with each heartbeat
}

// state is what this worker keeps between an instance's operations. The
// platform stores it without reading it and hands it to the next one.
type state struct {
	ContainerID    string `json:"container_id,omitempty"`
	OperationsDone int    `json:"operations_done"`
}

// failure is an error with the reason code the operation fails with.
type failure struct {
	reason string
	err    error
}

func (f *failure) Error() string { return f.reason + ": " + f.err.Error() }

func fail(reason string, err error) error { return &failure{reason, err} }

func main() {
	log.SetFlags(log.LstdFlags | log.LUTC)
	server := flag.String("server", os.Getenv("GPUAAS_API_BASE_URL"), "gpuaas API base URL (env GPUAAS_API_BASE_URL)")
	keyFile := flag.String("key-file", "", "the worker's service-account key file")
	w := &worker{}
	flag.StringVar(&w.app, "app", "", "slug of the app whose operations this worker runs")
	flag.StringVar(&w.image, "image", "", "container image run for every instance (stands in for the app's runtime)")
	flag.DurationVar(&w.hold, "hold", 0, "wait this long, heartbeating, after acquiring an operation and before doing it")
	flag.IntVar(&w.wait, "poll-wait", 10, "seconds each acquire waits for an operation (0-20)")
	once := flag.Bool("once", false, "handle one operation, then exit")
	flag.Parse()
	if *server == "" || *keyFile == "" || w.app == "" || w.image == "" {
		fmt.Fprintln(os.Stderr, "usage: external-worker --server URL --key-file PATH --app SLUG --image REF [--hold D] [--once] [--poll-wait S]")
		os.Exit(2)
	}
	key, err := client.ReadKeyFile(*keyFile)
	if err != nil {
		log.Fatal(err)
	}
	// Every request carries a fresh service-account token: the token
	// source mints one from the key and renews it before it expires. It
	// has its own plain client, so minting is not itself authorized here.
	tokens := client.NewTokenSource(client.New(*server, ""), key)
	w.api = client.New(*server, "")
	w.api.UserAgent = "gpuaas-external-worker"
	w.api.HTTP.Transport = tokens.Transport(nil)
	if w.docker, err = docker.New(docker.FromEnv, docker.WithAPIVersionNegotiation()); err != nil {
		log.Fatal(err)
	}
	defer w.docker.Close()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log.Printf("worker started: app=%s account=%s image=%s", w.app, key.ServiceAccountID, w.image)
	for ctx.Err() == nil {
		op, ok, retryAfter, err := w.api.AcquireWorkerOperation(ctx, w.app, w.wait)
		switch {
		case ctx.Err() != nil:
		case err != nil:
			log.Printf("acquire: %v", err)
			sleep(ctx, 5*time.Second)
		case !ok:
			sleep(ctx, max(retryAfter, time.Second))
		default:
			w.handle(ctx, op)
			if *once {
				return
			}
		}
	}
	log.Printf("worker stopped: %v", context.Cause(ctx))
}

// handle does one leased operation and reports how it went.
func (w *worker) handle(ctx context.Context, op client.WorkerOperation) {
	w.setStep(op, fmt.Sprintf("acquired (attempt %d, lease %s until %s)", op.Attempt, op.LeaseID, op.ExpiresAt))
	opCtx, stop := context.WithCancelCause(ctx)
	beating := make(chan struct{})
	go w.heartbeat(opCtx, stop, op, beating)
	var prev state
	_ = json.Unmarshal(op.State, &prev) // null or foreign: start counting at 0
	next, err := w.do(opCtx, op, prev)
	stop(nil) // the first cause wins: a cancel or a lost lease stays the cause
	<-beating
	cause := context.Cause(opCtx)
	reason, message := "worker_error", ""
	switch {
	case errors.Is(cause, errLeaseLost):
		log.Printf("op %s: %v; dropping it", op.OperationID, cause)
		return
	case errors.Is(cause, errCancelled):
		reason, message = "cancelled", cause.Error()
	case ctx.Err() != nil:
		// Shutting down: the lease stays ours until it expires. Restarted
		// before then, this worker acquires the same operation again; the
		// steps are idempotent, so it simply does them again.
		log.Printf("op %s: interrupted; leaving the lease to expire or to a restart", op.OperationID)
		return
	case err != nil:
		message = err.Error()
		if f, ok := errors.AsType[*failure](err); ok {
			reason, message = f.reason, f.err.Error()
		}
	default:
		b, _ := json.Marshal(next)
		w.report(ctx, op, "complete with state "+string(b), func() (client.Operation, error) {
			return w.api.CompleteWorkerOperation(ctx, w.app, op.OperationID, client.WorkerCompleteRequest{LeaseID: op.LeaseID, State: b})
		})
		return
	}
	// The state goes back unchanged: a failed operation leaves nothing new.
	// The message is for people and bounded (1024 bytes).
	message = message[:min(len(message), 1024)]
	w.report(ctx, op, "fail "+reason+": "+message, func() (client.Operation, error) {
		return w.api.FailWorkerOperation(ctx, w.app, op.OperationID, client.WorkerFailRequest{
			LeaseID: op.LeaseID, ReasonCode: reason, Message: message, State: op.State})
	})
}

// do runs the operation's steps and returns the state to complete with.
func (w *worker) do(ctx context.Context, op client.WorkerOperation, prev state) (state, error) {
	if w.hold > 0 {
		w.setStep(op, "holding for "+w.hold.String())
		if !sleep(ctx, w.hold) {
			return prev, ctx.Err()
		}
	}
	next := state{OperationsDone: prev.OperationsDone + 1}
	var err error
	switch op.Kind {
	case "create", "upgrade", "rollback":
		// The root component, then the members it has (an upgrade or a
		// rollback carries them to the new version).
		if next.ContainerID, err = w.ensureRunning(ctx, op, "gpuaas-ext-"+op.AppInstanceID, nil); err != nil {
			break
		}
		for _, m := range op.Members {
			if _, err = w.ensureMember(ctx, op, m); err != nil {
				break
			}
		}
	case "member_add", "member_recover":
		// A child operation: one container per member, named as the
		// platform suggests (stable per member).
		next.ContainerID = prev.ContainerID
		for _, m := range op.Members {
			if _, err = w.ensureMember(ctx, op, m); err != nil {
				break
			}
		}
	case "member_remove":
		next.ContainerID = prev.ContainerID
		for _, m := range op.Members {
			if err = w.remove(ctx, op, labelMember+"="+m.ID, "member "+m.Name); err != nil {
				break
			}
		}
	case "decommission", "cleanup":
		err = w.remove(ctx, op, labelInstance+"="+op.AppInstanceID, "instance "+op.AppInstanceID)
	default:
		err = fail("unsupported_kind", fmt.Errorf("this worker does not know operation kind %q", op.Kind))
	}
	return next, err
}

// ensureMember runs one member's container: the image, told the member's
// id, name, role and allocation.
func (w *worker) ensureMember(ctx context.Context, op client.WorkerOperation, m client.AppInstanceMember) (string, error) {
	return w.ensureRunning(ctx, op, m.WorkloadName, map[string]string{
		"GPUAAS_MEMBER_ID": m.ID, "GPUAAS_MEMBER_NAME": m.Name, "GPUAAS_MEMBER_ROLE": m.Role, "GPUAAS_ALLOCATION_ID": m.AllocationID})
}

// ensureRunning leaves exactly one container of the given name (the
// instance's root component, or a member when member carries its env)
// running the image for this operation. A container this operation already
// started (a previous attempt, before a crash) is kept; one of an earlier
// operation is replaced, which is what an upgrade or rollback is here.
func (w *worker) ensureRunning(ctx context.Context, op client.WorkerOperation, name string, member map[string]string) (string, error) {
	ins, err := w.docker.ContainerInspect(ctx, name, docker.ContainerInspectOptions{})
	switch {
	case err == nil:
		labels := ins.Container.Config.Labels
		if labels[labelWorker] != "true" || labels[labelInstance] != op.AppInstanceID {
			return "", fail("container_name_taken", fmt.Errorf("a container named %s exists and is not this worker's", name))
		}
		if labels[labelOperation] == op.OperationID && ins.Container.State != nil && ins.Container.State.Running {
			w.setStep(op, "container "+short(ins.Container.ID)+" already runs for this operation; reusing it")
			return ins.Container.ID, nil
		}
		w.setStep(op, "removing container "+short(ins.Container.ID)+" of operation "+labels[labelOperation])
		if _, err := w.docker.ContainerRemove(ctx, ins.Container.ID, docker.ContainerRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			return "", fail("container_remove_failed", err)
		}
	case !cerrdefs.IsNotFound(err):
		return "", fail("docker_unavailable", err)
	}
	if err := w.ensureImage(ctx, op); err != nil {
		return "", fail("image_pull_failed", err)
	}
	version := op.TargetVersion
	if version == "" {
		version = op.Version
	}
	w.setStep(op, "creating container "+name+" for version "+version)
	env := []string{"GPUAAS_APP_INSTANCE_ID=" + op.AppInstanceID, "GPUAAS_APP_VERSION=" + version}
	labels := map[string]string{labelWorker: "true", labelInstance: op.AppInstanceID, labelOperation: op.OperationID}
	for k, v := range member {
		env = append(env, k+"="+v)
	}
	if id := member["GPUAAS_MEMBER_ID"]; id != "" {
		labels[labelMember] = id
	}
	res, err := w.docker.ContainerCreate(ctx, docker.ContainerCreateOptions{Name: name, Config: &container.Config{
		Image: w.image, Env: env, Labels: labels,
	}})
	if err != nil {
		return "", fail("container_create_failed", err)
	}
	if _, err := w.docker.ContainerStart(ctx, res.ID, docker.ContainerStartOptions{}); err != nil {
		return "", fail("container_start_failed", err)
	}
	// Started is not running: an image whose process exits at once must
	// fail the operation, not leave a dead instance marked running.
	ins, err = w.docker.ContainerInspect(ctx, res.ID, docker.ContainerInspectOptions{})
	if err != nil {
		return "", fail("docker_unavailable", err)
	}
	if st := ins.Container.State; st == nil || !st.Running {
		return "", fail("container_exited", fmt.Errorf("container %s is not running after start", short(res.ID)))
	}
	w.setStep(op, "container "+short(res.ID)+" running")
	return res.ID, nil
}

// ensureImage pulls the image unless the engine already has it (a locally
// built image has nothing to pull from).
func (w *worker) ensureImage(ctx context.Context, op client.WorkerOperation) error {
	if _, err := w.docker.ImageInspect(ctx, w.image); err == nil {
		return nil
	} else if !cerrdefs.IsNotFound(err) {
		return err
	}
	w.setStep(op, "pulling "+w.image)
	resp, err := w.docker.ImagePull(ctx, w.image, docker.ImagePullOptions{})
	if err != nil {
		return err
	}
	defer resp.Close()
	return resp.Wait(ctx)
}

// remove removes this worker's containers that carry a label (all of an
// instance's, or one member's) and then checks that none is left:
// decommission, cleanup and member removal complete only on a verified
// absence.
func (w *worker) remove(ctx context.Context, op client.WorkerOperation, label, what string) error {
	mine := docker.Filters{}.Add("label", labelWorker+"=true").Add("label", label)
	list := func() ([]string, error) {
		res, err := w.docker.ContainerList(ctx, docker.ContainerListOptions{All: true, Filters: mine})
		ids := []string{}
		for _, c := range res.Items {
			ids = append(ids, c.ID)
		}
		return ids, err
	}
	ids, err := list()
	if err != nil {
		return fail("docker_unavailable", err)
	}
	for _, id := range ids {
		w.setStep(op, "removing container "+short(id))
		if _, err := w.docker.ContainerRemove(ctx, id, docker.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
			return fail("container_remove_failed", err)
		}
	}
	if ids, err = list(); err != nil {
		return fail("docker_unavailable", err)
	}
	if len(ids) > 0 {
		return fail("teardown_incomplete", fmt.Errorf("%d container(s) of %s remain", len(ids), what))
	}
	w.setStep(op, "verified: no container of "+what+" remains")
	return nil
}

// heartbeat extends the lease every third of its remaining time until ctx
// ends. A cancelled operation or a lost lease stops the work (stop's cause).
// A failed heartbeat is retried at the next tick: the lease still has two
// thirds of its time.
func (w *worker) heartbeat(ctx context.Context, stop context.CancelCauseFunc, op client.WorkerOperation, done chan<- struct{}) {
	defer close(done)
	expires := op.ExpiresAt
	for {
		if !sleep(ctx, untilThird(expires)) {
			return
		}
		l, err := w.api.HeartbeatWorkerOperation(ctx, w.app, op.OperationID, op.LeaseID, w.step.Load().(string))
		var api *client.APIError
		switch {
		case ctx.Err() != nil:
			return
		case errors.As(err, &api) && api.Code == "lease_lost":
			stop(errLeaseLost)
			return
		case err != nil:
			log.Printf("op %s: heartbeat: %v", op.OperationID, err)
		case l.Cancelled:
			stop(errCancelled)
			return
		default:
			expires = l.ExpiresAt
		}
	}
}

// report completes or fails the operation. Network errors are retried: the
// same complete or fail with the same lease gets the same answer.
func (w *worker) report(ctx context.Context, op client.WorkerOperation, what string, call func() (client.Operation, error)) {
	for try := 1; ; try++ {
		res, err := call()
		var api *client.APIError
		switch {
		case err == nil:
			log.Printf("op %s: %s: answered state=%s reason=%s", op.OperationID, what, res.State, res.ReasonCode)
			return
		case errors.As(err, &api) || try == 5:
			log.Printf("op %s: %s: %v", op.OperationID, what, err)
			return
		}
		log.Printf("op %s: %s (try %d): %v; retrying", op.OperationID, what, try, err)
		if !sleep(ctx, time.Duration(try)*time.Second) {
			return
		}
	}
}

// setStep logs what the operation does now; the next heartbeat says it too.
func (w *worker) setStep(op client.WorkerOperation, step string) {
	w.step.Store(step)
	log.Printf("op %s %s instance %s: %s", op.OperationID, op.Kind, op.AppInstanceID, step)
}

// untilThird is a third of the time left until an RFC 3339 instant (at
// least a second; 5s when it cannot be read).
func untilThird(rfc3339 string) time.Duration {
	t, err := time.Parse(time.RFC3339Nano, rfc3339)
	if err != nil {
		return 5 * time.Second
	}
	return max(time.Until(t)/3, time.Second)
}

// sleep waits d, or less if ctx ends first; it says whether it slept d.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func short(id string) string { return id[:min(12, len(id))] }
