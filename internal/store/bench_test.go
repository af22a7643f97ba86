package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// Baselines for the API benchmarks in internal/httpapi: the same work with
// no HTTP, token or policy in front of it.

func BenchmarkStoreAuditedWrite(b *testing.B) {
	storetest.EachDialect(b, func(b *testing.B, d store.Dialect) {
		db := storetest.Open(b, d)
		ctx := context.Background()
		o := iam.Org{ID: newID(), Slug: "bench", Name: "B", CreatedAt: time.Now()}
		if err := db.Queries().CreateOrg(ctx, o); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			err := db.Mutate(ctx, func(tx *store.Tx) error {
				p := iam.Project{ID: newID(), OrgID: o.ID, Slug: fmt.Sprintf("p-%d", i), Name: "P", CreatedAt: time.Now()}
				if err := tx.CreateProject(ctx, p); err != nil {
					return err
				}
				return tx.Audit(store.AuditEvent{Action: "project.create", ResourceType: "project", ResourceID: p.ID}, nil, p)
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkStoreList10k(b *testing.B) {
	storetest.EachDialect(b, func(b *testing.B, d store.Dialect) {
		db := storetest.Open(b, d)
		ctx := context.Background()
		o := iam.Org{ID: newID(), Slug: "bench", Name: "B", CreatedAt: time.Now()}
		err := db.InTx(ctx, func(q *store.Queries) error {
			if err := q.CreateOrg(ctx, o); err != nil {
				return err
			}
			for i := 0; i < 10_000; i++ {
				if err := q.CreateProject(ctx, iam.Project{ID: newID(), OrgID: o.ID, Slug: fmt.Sprintf("p-%05d", i), Name: "P", CreatedAt: time.Now()}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			n, cursor := 0, ""
			for {
				ps, next, err := db.Queries().ListProjects(ctx, o.ID, nil, store.Page{Limit: 500, Cursor: cursor})
				if err != nil {
					b.Fatal(err)
				}
				n += len(ps)
				if next == "" {
					break
				}
				cursor = next
			}
			if n != 10_000 {
				b.Fatalf("listed %d", n)
			}
		}
	})
}
