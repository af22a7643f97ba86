package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/store"
)

// Helpers of the per-domain conformance suites (nodes, artifacts, service
// accounts): each takes its domain's storage through the port the domain
// holds, so what is asserted is what the domain relies on.

// conformanceCase is one case of a suite. The cases of a dialect share
// its database: a case scopes what it asserts to the rows it made (its own
// org, project, nodes, or times no other case uses), or opens a database
// of its own where it must see a whole table.
type conformanceCase struct {
	name string
	run  func(t *testing.T, db *store.DB)
}

// t0 is the suites' clock: explicit times, never sleeps. Its microseconds
// must survive a round trip on both dialects.
var t0 = time.Date(2031, 3, 4, 5, 6, 7, 123456000, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// mine keeps, in order, the items of got whose id is in ids: a listing
// over a table other cases share.
func mine[T any](got []T, id func(T) string, ids []string) []T {
	keep := map[string]bool{}
	for _, i := range ids {
		keep[i] = true
	}
	var out []T
	for _, g := range got {
		if keep[id(g)] {
			out = append(out, g)
		}
	}
	return out
}

func mkProject(t *testing.T, db *store.DB, org iam.Org, slug string) iam.Project {
	t.Helper()
	p := iam.Project{ID: newID(), OrgID: org.ID, Slug: slug, Name: slug, CreatedAt: t0}
	if err := db.Queries().CreateProject(context.Background(), p); err != nil {
		t.Fatalf("create project: %v", err)
	}
	return p
}

// audited records the audit row every Mutate must leave.
func audited(tx storage.Tx) error {
	return tx.Audit(storage.AuditEvent{Action: "conformance.test", ResourceType: "test"}, nil, nil)
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got %v, want %v", what, err, want)
	}
}

func noErr(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func same(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

// sameJSON compares JSON documents by meaning: PostgreSQL's jsonb
// reorders keys and drops whitespace.
func sameJSON(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if (got == nil) != (want == nil) {
		t.Fatalf("%s: got %q, want %q", what, got, want)
	}
	if got == nil {
		return
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: got invalid JSON %q: %v", what, got, err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("%s: want invalid JSON %q: %v", what, want, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("%s: got %s, want %s", what, got, want)
	}
}

// pageAll follows cursors to the end with pages of limit, checking that
// every page but the last is full and that the walk terminates.
func pageAll[T any](t *testing.T, limit int, list func(p storage.Page) ([]T, string, error)) []T {
	t.Helper()
	var all []T
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatal("pagination does not terminate")
		}
		got, next, err := list(storage.Page{Limit: limit, Cursor: cursor})
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		all = append(all, got...)
		if next == "" {
			return all
		}
		if len(got) != limit {
			t.Fatalf("page %d has %d rows and a next cursor, want %d", pages, len(got), limit)
		}
		cursor = next
	}
}

// checkClamp asserts a list of n > MaxPageLimit rows: no limit gives the
// default page, a limit beyond the maximum gives the maximum, both with a
// cursor to go on.
func checkClamp[T any](t *testing.T, n int, list func(p storage.Page) ([]T, string, error)) {
	t.Helper()
	got, next, err := list(storage.Page{})
	if err != nil || len(got) != storage.DefaultPageLimit || next == "" {
		t.Fatalf("no limit: %d rows, next %q, err %v; want %d and a cursor", len(got), next, err, storage.DefaultPageLimit)
	}
	got, next, err = list(storage.Page{Limit: 100 * storage.MaxPageLimit})
	if err != nil || len(got) != storage.MaxPageLimit || next == "" {
		t.Fatalf("limit beyond max: %d rows, next %q, err %v; want %d and a cursor", len(got), next, err, storage.MaxPageLimit)
	}
	rest, next, err := list(storage.Page{Limit: 100 * storage.MaxPageLimit, Cursor: next})
	if err != nil || len(rest) != n-storage.MaxPageLimit || next != "" {
		t.Fatalf("after max: %d rows, next %q, err %v; want %d and no cursor", len(rest), next, err, n-storage.MaxPageLimit)
	}
	if _, _, err := list(storage.Page{Cursor: "!!not-a-cursor"}); err == nil {
		t.Fatal("a garbage cursor must be refused")
	}
}
