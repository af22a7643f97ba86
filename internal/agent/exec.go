package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/agent/driver"
)

// handle executes one task at most once and reports its result.
func (a *Agent) handle(ctx context.Context, t nodeapi.Task) {
	res, done, ok := a.runOnce(ctx, t)
	if !ok {
		return // shutting down: the lease expires and the task comes back
	}
	res = fitResult(res) // a result stored by an agent that did not bound it
	a.log.InfoContext(ctx, "task done", "task_id", t.ID, "kind", t.Kind, "state", res.State, "reason", res.ReasonCode, "repeat", done)
	for i := range 5 {
		c, err := a.authed(ctx)
		if err == nil {
			if err = c.ReportNodeTaskResult(ctx, a.id.NodeID, t.ID, res); err == nil {
				return
			}
			a.refused(err)
		}
		a.log.WarnContext(ctx, "could not report task result; the server redelivers it and the stored result is sent again", "task_id", t.ID, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(max(time.Duration(1<<i)*500*time.Millisecond, retryAfter(err))):
		}
	}
}

// runOnce executes t unless its result is stored (delivery is at least
// once, across restarts too: a stored result is re-reported, done is true).
// ok is false when ctx ended mid-task. A task is recorded as started before
// it runs, so the workloads it starts are never taken for orphans; a task
// that cannot be recorded does not run and fails.
func (a *Agent) runOnce(ctx context.Context, t nodeapi.Task) (res nodeapi.TaskResult, done, ok bool) {
	if res, done := a.results.Get(t.ID); done {
		return res, true, true
	}
	if err := a.started.Put(t.ID, nodeapi.TaskResult{State: "started"}); err != nil {
		return nodeapi.TaskResult{State: nodeapi.ResultFailed, ReasonCode: nodeapi.ReasonInternal,
			Message: "the agent could not record the task as started in its data dir, so it did not run it: " + err.Error()}, false, true
	}
	res = a.execute(ctx, t)
	if ctx.Err() != nil {
		return res, false, false
	}
	if err := a.results.Put(t.ID, res); err != nil {
		a.log.WarnContext(ctx, "could not store task result", "task_id", t.ID, "err", err)
	} else if err := a.started.Remove(t.ID); err != nil {
		a.log.WarnContext(ctx, "could not remove the started record of a finished task", "task_id", t.ID, "err", err)
	}
	return res, false, true
}

func decode[T any](t nodeapi.Task) (T, error) {
	var v T
	if err := json.Unmarshal(t.Payload, &v); err != nil {
		return v, &driver.Failure{Reason: nodeapi.ReasonInvalidTask, Message: fmt.Sprintf("%s payload: %v", t.Kind, err)}
	}
	return v, nil
}

// execute runs a task and turns its outcome into a result with a reason code.
func (a *Agent) execute(ctx context.Context, t nodeapi.Task) nodeapi.TaskResult {
	a.executed.Add(1)
	return fitResult(a.outcome(ctx, t))
}

// outcome runs a task and says how it ended, before the result is bounded.
func (a *Agent) outcome(ctx context.Context, t nodeapi.Task) nodeapi.TaskResult {
	out, err := a.dispatch(ctx, t)
	if err != nil {
		f := driver.AsFailure(err)
		return nodeapi.TaskResult{State: nodeapi.ResultFailed, ReasonCode: f.Reason, Message: f.Message, LogTail: trimLog(f.LogTail)}
	}
	res := nodeapi.TaskResult{State: nodeapi.ResultSucceeded}
	if out != nil {
		b, err := json.Marshal(out)
		if err != nil {
			return nodeapi.TaskResult{State: nodeapi.ResultFailed, ReasonCode: nodeapi.ReasonInternal, Message: err.Error()}
		}
		res.Output = b
	}
	return res
}

func (a *Agent) dispatch(ctx context.Context, t nodeapi.Task) (any, error) {
	if err := a.drv.Ping(ctx); err != nil {
		return nil, &driver.Failure{Reason: nodeapi.ReasonEngineUnavailable, Message: "the Docker engine does not answer: " + err.Error()}
	}
	owner := driver.Owner{TaskID: t.ID, InstanceID: t.InstanceID, ProjectID: t.ProjectID}
	switch t.Kind {
	case nodeapi.KindImagePull:
		p, err := decode[nodeapi.ImagePull](t)
		if err != nil {
			return nil, err
		}
		// The run that uses the image may come long after the grace. The
		// hold comes first: an image the pull finds on the engine is then
		// either spared by the pruner or gone before the pull looked, and
		// pulled again (see holds).
		by := holderOf(t, "")
		a.holds.Hold(by, p.Repository+"@"+p.Digest)
		ref, err := a.drv.Pull(ctx, p)
		if err != nil && ctx.Err() == nil {
			// Only this pull's hold: another task's hold on the image (an
			// earlier pull's, a run's) lives by its own rule.
			a.holds.Drop(by)
		}
		return map[string]string{"image": ref, "image_digest": p.Digest}, err
	case nodeapi.KindContainerRun:
		r, err := decode[nodeapi.ContainerRun](t)
		if err != nil {
			return nil, err
		}
		refs := []string{r.Image.Repository + "@" + r.Image.Digest}
		return a.run(ctx, holderOf(t, r.Name), refs, func() (nodeapi.RunOutput, error) { return a.drv.Run(ctx, owner, r) })
	case nodeapi.KindContainerStop:
		r, err := decode[nodeapi.ContainerRef](t)
		if err != nil {
			return nil, err
		}
		return nil, a.drv.Stop(ctx, a.ref(t, r))
	case nodeapi.KindContainerRemove:
		r, err := decode[nodeapi.ContainerRef](t)
		if err != nil {
			return nil, err
		}
		// A removal of the whole instance (no container named) takes its
		// scratch path and platform files too: decommission's last step,
		// which teardown.verify then checks.
		ref := a.ref(t, r)
		if err := a.drv.Remove(ctx, ref); err != nil {
			return nil, err
		}
		switch {
		case ref.ContainerID == "" && ref.Name == "":
			a.holds.Release(ref.InstanceID) // no run of the instance is coming
		case ref.Name != "":
			a.holds.ReleaseWorkload(t.InstanceID, ref.Name) // an interrupted run of it is not coming back
		}
		return nil, nil
	case nodeapi.KindWorkloadInspect:
		r, err := decode[nodeapi.ContainerRef](t)
		if err != nil {
			return nil, err
		}
		ws, logs, err := a.drv.Inspect(ctx, a.ref(t, r), 50)
		if err != nil {
			return nil, err
		}
		return map[string]any{"workloads": ws, "log_tail": trimLog(logs)}, nil
	case nodeapi.KindTeardownVerify:
		v, err := decode[nodeapi.TeardownVerify](t)
		if err != nil {
			return nil, err
		}
		if v.InstanceID == "" {
			v.InstanceID = t.InstanceID
		}
		rem, err := a.drv.Verify(ctx, v.InstanceID, v.Names)
		if err != nil {
			return nil, err
		}
		if len(rem) > 0 {
			return nil, &driver.Failure{Reason: nodeapi.ReasonResourcesRemain, Message: fmt.Sprintf("%d resources remain: %v", len(rem), rem)}
		}
		if v.Names == nil {
			a.holds.Release(v.InstanceID) // torn down: no run of the instance is coming
		}
		return nodeapi.VerifyOutput{Remaining: rem}, nil
	case nodeapi.KindComposeUp:
		u, err := decode[nodeapi.ComposeUp](t)
		if err != nil {
			return nil, err
		}
		// Every image the project's services use is held, not only those
		// the task lists: Up pulls (or finds) an unlisted one too, and the
		// pruner would remove it before its container is created.
		refs, err := a.drv.ComposeImages(ctx, u)
		if err != nil {
			return nil, err
		}
		return a.run(ctx, holderOf(t, u.Project), refs, func() (nodeapi.RunOutput, error) { return a.drv.Up(ctx, owner, u) })
	case nodeapi.KindComposeDown:
		d, err := decode[nodeapi.ComposeDown](t)
		if err != nil {
			return nil, err
		}
		if err := a.drv.Down(ctx, d.Project, t.InstanceID); err != nil {
			return nil, err
		}
		a.holds.ReleaseWorkload(t.InstanceID, d.Project) // an interrupted compose.up of it is not coming back
		return nil, nil
	}
	return nil, &driver.Failure{Reason: nodeapi.ReasonInvalidTask, Message: fmt.Sprintf("this agent does not know task kind %q", t.Kind)}
}

// ref scopes a container reference to the task's instance when it names none.
func (a *Agent) ref(t nodeapi.Task, r nodeapi.ContainerRef) nodeapi.ContainerRef {
	if r.InstanceID == "" && r.ContainerID == "" && r.Name == "" {
		r.InstanceID = t.InstanceID
	}
	return r
}

// run starts the workload of a container.run or compose.up with its images
// (refs) held by the run (by), so that the pruner cannot remove one between
// the driver's check that the engine holds it and the container's
// creation: the hold is taken before start, whose Pull looks for each image
// (and pulls one that is gone) only then (see holds). A run that ended ends
// its holds: with its containers created (they keep the images in use; the
// engine refuses to remove them), also the holds the pulls of its instance
// took for it; failed (an upgrade's failed run reverts to the image the
// instance ran before), only its own, a pull's hold waiting on for the next
// run. A run the agent's stop interrupted keeps them: its task comes back
// and carries on.
func (a *Agent) run(ctx context.Context, by holder, refs []string, start func() (nodeapi.RunOutput, error)) (nodeapi.RunOutput, error) {
	a.holds.Hold(by, refs...)
	out, err := start()
	if ctx.Err() == nil {
		a.holds.EndRun(by, err == nil, refs...)
	}
	return out, err
}
