package migrations_test

import (
	"context"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/migrations"
	"github.com/braidflow/braid/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

func tables(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT tablename FROM pg_tables
		WHERE schemaname = 'public' AND (tablename LIKE 'braid\_%' OR tablename LIKE 'river\_%')
		  AND tablename <> 'braid_schema_version'
		ORDER BY tablename`)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestUpDownUpRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testutil.DB(t) // already fully migrated
	want := []string{
		"braid_job_progress", "braid_leases", "braid_recurring", "braid_runs", "braid_schedules", "braid_steps", "braid_tasks",
		"river_job", "river_leader", "river_migration", "river_notification", "river_queue",
	}
	before := tables(t, pool)
	for _, name := range want {
		found := false
		for _, b := range before {
			found = found || b == name
		}
		if !found {
			t.Errorf("table %s missing after Up; have %v", name, before)
		}
	}

	m, err := migrations.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	status, err := m.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var applied []int64
	for _, s := range status {
		if !s.Applied {
			t.Errorf("version %d (%s) not applied", s.Version, s.Name)
		}
		applied = append(applied, s.Version)
	}
	if diff := cmp.Diff([]int64{1, 2, 3, 4, 5, 6, 7, 8, 100}, applied); diff != "" {
		t.Errorf("versions (-want +got):\n%s", diff)
	}

	res, err := m.DownTo(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != len(applied) {
		t.Fatalf("DownTo(0) reverted %d versions, want %d", len(res), len(applied))
	}
	if left := tables(t, pool); len(left) != 0 {
		t.Fatalf("tables left after reverting everything: %v", left)
	}

	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, tables(t, pool)); diff != "" {
		t.Errorf("tables after down and up again (-before +after):\n%s", diff)
	}

	redo, err := m.Redo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(redo) != 2 || redo[0].Direction != "down" || redo[1].Direction != "up" || redo[1].Version != 100 {
		t.Fatalf("Redo = %+v, want down then up of version 100", redo)
	}
	v, err := m.Version(ctx)
	if err != nil || v != 100 {
		t.Fatalf("Version = %d, %v; want 100", v, err)
	}
}

func TestSecondSetWithItsOwnTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testutil.DB(t)
	app := fstest.MapFS{
		"00001_things.sql": {Data: []byte("-- +goose Up\nCREATE TABLE things (id int);\n-- +goose Down\nDROP TABLE things;\n")},
	}
	m, err := migrations.New(pool, &migrations.Config{FS: app, Table: "app_schema_version"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	// braid's own set is untouched by the application's.
	st, err := migrations.Status(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if !s.Applied {
			t.Errorf("braid version %d not applied", s.Version)
		}
	}
	if _, err := pool.Exec(ctx, "INSERT INTO things VALUES (1)"); err != nil {
		t.Fatal(err)
	}
}

func TestConcurrentUpAppliesOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testutil.DB(t)
	if err := migrations.Down(ctx, pool); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 3)
	for range 3 {
		go func() { errs <- migrations.Up(ctx, pool) }()
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM braid_schema_version WHERE version_id = 100 AND is_applied").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("version 100 recorded %d times, want 1", n)
	}
}
