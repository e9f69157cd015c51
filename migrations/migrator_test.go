package migrations_test

import (
	"context"
	"io/fs"
	"slices"
	"strconv"
	"strings"
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

// embeddedVersions lists the versions of the embedded migration files.
func embeddedVersions(t *testing.T) []int64 {
	t.Helper()
	entries, err := fs.ReadDir(migrations.FS(), ".")
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for _, e := range entries {
		prefix, _, _ := strings.Cut(e.Name(), "_")
		v, err := strconv.ParseInt(prefix, 10, 64)
		if err != nil {
			t.Fatalf("migration file %s has no version prefix", e.Name())
		}
		out = append(out, v)
	}
	slices.Sort(out)
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
	if diff := cmp.Diff(embeddedVersions(t), applied); diff != "" {
		t.Errorf("versions (-want +got):\n%s", diff)
	}
	for _, v := range []int64{1, 2, 3, 4, 5, 6, 7, 8, 100} {
		if !slices.Contains(applied, v) {
			t.Errorf("version %d not applied", v)
		}
	}
	latest := applied[len(applied)-1]

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
	if len(redo) != 2 || redo[0].Direction != "down" || redo[1].Direction != "up" || redo[1].Version != latest {
		t.Fatalf("Redo = %+v, want down then up of version %d", redo, latest)
	}
	v, err := m.Version(ctx)
	if err != nil || v != latest {
		t.Fatalf("Version = %d, %v; want %d", v, err, latest)
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
	versions := embeddedVersions(t)
	latest := versions[len(versions)-1]
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
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM braid_schema_version WHERE version_id = $1 AND is_applied", latest).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("version %d recorded %d times, want 1", latest, n)
	}
}
