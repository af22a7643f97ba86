package events_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/wakeup"
)

// slowFallbacks makes every poll that is not woken wait a minute: within the
// tests' 10 s only a wake-up over NATS can answer.
func slowFallbacks(c *config.Config) {
	c.Events.RelayInterval, c.Events.LeaseTTL = time.Minute, 2*time.Minute
}

// An event committed through replica A reaches a stream held open by
// replica B, whichever replica's relay leads: the commit wakes the relay
// (wakeup.EventsCommitted), and the relay's sequencing wakes every
// replica's streams (wakeup.EventsSequenced), which B must hear. The
// relays' own polls are a minute away.
func TestEventCommittedOnOneReplicaReachesAStreamOnAnother(t *testing.T) {
	a, b := servertest.TwoReplicas(t, slowFallbacks)
	sequenced := make(chan struct{}, 1)
	b.App.Wake().OnNotify(wakeup.EventsSequenced, func() {
		select {
		case sequenced <- struct{}{}:
		default:
		}
	})
	admin := client.New(b.URL, b.Admin().Token)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan client.Event, 1)
	opened := make(chan struct{})
	go func() {
		err := admin.StreamEvents(ctx, b.Creds.ProjectID, client.ResumeNow, func(e client.Event) error {
			if e.Type == "iam.service_account.created" {
				got <- e
				return errStop
			}
			return nil
		})
		if err != nil && !errors.Is(err, errStop) && ctx.Err() == nil {
			t.Error(err)
		}
	}()
	go func() {
		// The stream waits on B's hub once it has read what there is.
		for b.App.Wake().Waiting() == 0 && ctx.Err() == nil {
			time.Sleep(time.Millisecond) // another goroutine's HTTP request; no hook to wait on
		}
		close(opened)
	}()
	select {
	case <-opened:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream on replica B never waited")
	}
	sa := a.Login(b.Creds.AdminEmail, b.Creds.AdminPassword).Do("POST", "/api/v1/projects/"+a.Creds.ProjectID+"/service-accounts",
		map[string]any{"name": "ci", "slug": "ci", "roles": []string{"project_viewer"}}).Want(t, 201)
	select {
	case e := <-got:
		if !strings.HasSuffix(e.Subject, sa.String("id")) {
			t.Fatalf("stream on B got %+v, want the service account %s", e, sa.String("id"))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an event committed on replica A did not reach the stream on replica B within 10 s (the relays' polls are a minute away)")
	}
	select {
	case <-sequenced:
	case <-time.After(10 * time.Second):
		t.Fatal("replica B's streams were never woken by the relay's sequencing (wakeup.EventsSequenced)")
	}
}

var errStop = errors.New("stop")

// Revoking someone's access through replica A reaches replica B's hub, so
// B's open streams re-check their readers at once.
func TestAccessChangeOnOneReplicaReachesAnother(t *testing.T) {
	a, b := servertest.TwoReplicas(t)
	heard := make(chan struct{}, 1)
	b.App.Wake().OnNotify(wakeup.AccessChanged, func() {
		select {
		case heard <- struct{}{}:
		default:
		}
	})
	admin := a.Login(b.Creds.AdminEmail, b.Creds.AdminPassword)
	uid, _ := a.NewUser(admin, "leaver@example.com")
	admin.Do("POST", "/api/v1/users/"+uid+"/disable", nil).Want(t, 200)
	select {
	case <-heard:
	case <-time.After(10 * time.Second):
		t.Fatal("replica B did not hear of an account disabled through replica A")
	}
}
