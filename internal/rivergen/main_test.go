package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCommittedFilesMatchPinnedRiver(t *testing.T) {
	t.Parallel()
	files, version, err := render()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(version, riverSeries) {
		t.Fatalf("pinned River %s is not in the %sx series", version, riverSeries)
	}
	if drift := compare(filepath.Join("..", "..", "migrations", "sql"), files); len(drift) > 0 {
		t.Fatalf("migrations/sql drifted: %v", drift)
	}
}

func TestAlteredFileIsDrift(t *testing.T) {
	t.Parallel()
	files, _, err := render()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if drift := compare(dir, files); len(drift) != 0 {
		t.Fatalf("fresh render reported drift: %v", drift)
	}
	target := filepath.Join(dir, "00002_river_initial_schema.sql")
	body, _ := os.ReadFile(target)
	if err := os.WriteFile(target, append(body, []byte("-- edited by hand\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "00008_river_job_id_autoincrement.sql")); err != nil {
		t.Fatal(err)
	}
	drift := compare(dir, files)
	want := []string{"00002_river_initial_schema.sql: content differs", "00008_river_job_id_autoincrement.sql: missing"}
	if strings.Join(drift, "|") != strings.Join(want, "|") {
		t.Fatalf("drift = %q, want %q", drift, want)
	}
}

func TestRenderedSQLHasNoTemplateMarkers(t *testing.T) {
	t.Parallel()
	files, _, err := render()
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != lastVersion-firstVersion+1 {
		t.Fatalf("rendered %d files, want %d", len(files), lastVersion-firstVersion+1)
	}
	for name, body := range files {
		if strings.Contains(string(body), "TEMPLATE") {
			t.Errorf("%s still holds a template marker", name)
		}
		if !strings.Contains(string(body), "-- +goose Up") || !strings.Contains(string(body), "-- +goose Down") {
			t.Errorf("%s is not a goose migration", name)
		}
	}
}
