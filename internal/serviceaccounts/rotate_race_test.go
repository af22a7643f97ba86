package serviceaccounts_test

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// A disable racing key rotations stays a disable: a rotation never writes
// back the account status it read before the disable committed (which on
// PostgreSQL silently re-enabled the account, whose fresh key then minted
// tokens again). Each round fires one disable among several rotations
// (grace 0, so no key limit is reached); afterwards the account must be
// disabled.
func TestDisableRacingRotationsStaysDisabled(t *testing.T) {
	forEachDialect(t, func(t *testing.T, e *env) {
		base := "/api/v1/projects/" + e.Creds.ProjectID + "/service-accounts"
		const rounds, rotations = 15, 4
		for i := range rounds {
			r, _ := e.createSA(t, e.admin, e.Creds.ProjectID, map[string]any{"name": "racer", "slug": fmt.Sprintf("racer-%d", i)})
			path := base + "/" + r.String("id")
			atOnce(rotations+1, func(j int) {
				if j == rotations/2 {
					if d := e.admin.Do("POST", path+"/disable", nil); d.Status != 200 {
						t.Errorf("disable: %d %s", d.Status, d.Body)
					}
					return
				}
				rot := e.admin.Do("POST", path+"/rotate-key", map[string]any{"grace_period_seconds": 0})
				if rot.Status != 200 {
					t.Errorf("rotate: %d %s", rot.Status, rot.Body)
					return
				}
				e.remember(rot.String("private_key_pem"))
			})
			if got := e.admin.Do("GET", path, nil).Want(t, 200).String("status"); got != "disabled" {
				t.Fatalf("round %d: after a disable racing %d rotations the account is %q, want disabled", i, rotations, got)
			}
		}
	})
}

// Rotations at once with a grace period each count the keys the others
// left: never more than three keys are valid at once, and every key but
// the newest has an end. Before the account's row was held by each
// change, three rotations on PostgreSQL all counted one key and left four
// valid, two or three of them with no end at all.
func TestRacingGraceRotationsKeepTheKeyLimit(t *testing.T) {
	forEachDialect(t, func(t *testing.T, e *env) {
		base := "/api/v1/projects/" + e.Creds.ProjectID + "/service-accounts"
		const rounds, rotations = 5, 4
		for i := range rounds {
			r, _ := e.createSA(t, e.admin, e.Creds.ProjectID, map[string]any{"name": "rotor", "slug": fmt.Sprintf("rotor-%d", i)})
			path := base + "/" + r.String("id")
			atOnce(rotations, func(int) {
				rot := e.admin.Do("POST", path+"/rotate-key", map[string]any{"grace_period_seconds": 3600})
				switch {
				case rot.Status == 200:
					e.remember(rot.String("private_key_pem"))
				case rot.Status != 409 || rot.ErrorCode() != "too_many_active_keys":
					t.Errorf("rotate: %d %s", rot.Status, rot.Body)
				}
			})
			acc := e.admin.Do("GET", path, nil).Want(t, 200)
			valid, endless := 0, 0
			for _, k := range acc.JSON["keys"].([]any) {
				k := k.(map[string]any)
				end, _ := k["expires_at"].(string)
				at, err := time.Parse(time.RFC3339Nano, end)
				switch {
				case end == "":
					valid++
					endless++
				case err == nil && at.After(time.Now()):
					valid++
				}
			}
			if valid > 3 || endless != 1 {
				t.Fatalf("round %d: after %d rotations at once, %d keys are valid (at most 3) and %d have no end (want 1): %s",
					i, rotations, valid, endless, acc.Body)
			}
		}
	})
}

// atOnce runs f(0) … f(n-1), each in a goroutine of its own, released
// together, and returns when all have returned.
func atOnce(n int, f func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			f(i)
		})
	}
	close(start)
	wg.Wait()
}
