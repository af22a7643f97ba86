package store_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"

	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// TestMigratedSchemasMatch migrates both dialects and compares what a
// query can depend on: every table with its columns, every index by name,
// and which row events the triggers of each table guard (the append-only
// ledger must be append-only on both).
func TestMigratedSchemasMatch(t *testing.T) {
	ctx := context.Background()
	shapes := map[store.Dialect]store.SchemaShape{}
	for _, d := range storetest.Dialects {
		s, err := store.SchemaShapeForTest(ctx, storetest.Open(t, d))
		if err != nil {
			t.Fatalf("%s schema: %v", d, err)
		}
		shapes[d] = s
	}
	lite, pg := shapes[store.SQLite], shapes[store.Postgres]
	if len(lite.Columns) == 0 {
		t.Fatal("SQLite schema has no tables: the reader is broken")
	}
	t.Logf("SQLite: %d tables, %d indexes, %d guarded tables; PostgreSQL: %d, %d, %d",
		len(lite.Columns), len(lite.Indexes), len(lite.Triggers), len(pg.Columns), len(pg.Indexes), len(pg.Triggers))
	for _, diff := range compareShapes(lite, pg) {
		t.Error(diff)
	}
}

func compareShapes(lite, pg store.SchemaShape) []string {
	var diffs []string
	for _, table := range unionKeys(lite.Columns, pg.Columns) {
		l, p := lite.Columns[table], pg.Columns[table]
		switch {
		case l == nil:
			diffs = append(diffs, fmt.Sprintf("table %s exists only on PostgreSQL", table))
		case p == nil:
			diffs = append(diffs, fmt.Sprintf("table %s exists only on SQLite", table))
		case !slices.Equal(l, p):
			diffs = append(diffs, fmt.Sprintf("table %s: columns differ\n  SQLite:     %v\n  PostgreSQL: %v", table, l, p))
		}
	}
	for _, idx := range unionKeys(lite.Indexes, pg.Indexes) {
		l, inL := lite.Indexes[idx]
		p, inP := pg.Indexes[idx]
		switch {
		case inL && inP && l != p:
			diffs = append(diffs, fmt.Sprintf("index %s is on %s in SQLite but on %s in PostgreSQL", idx, l, p))
		case inL && !inP:
			diffs = append(diffs, fmt.Sprintf("index %s (on %s) exists only on SQLite", idx, l))
		case inP && !inL:
			diffs = append(diffs, fmt.Sprintf("index %s (on %s) exists only on PostgreSQL", idx, p))
		}
	}
	for _, table := range unionKeys(lite.Triggers, pg.Triggers) {
		if l, p := lite.Triggers[table], pg.Triggers[table]; !slices.Equal(l, p) {
			diffs = append(diffs, fmt.Sprintf("table %s: triggers guard %v on SQLite but %v on PostgreSQL", table, l, p))
		}
	}
	return diffs
}

func unionKeys[V any](a, b map[string]V) []string {
	seen := map[string]bool{}
	for k := range a {
		seen[k] = true
	}
	for k := range b {
		seen[k] = true
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
