// Command rivergen renders River's schema migrations into goose files.
//
// River's raw migration SQL carries /* TEMPLATE: schema */ markers that its
// own migrator fills in at run time. braid's schema is owned by goose alone,
// so rivergen renders those markers once, with River's own template
// replacer, and writes one goose file per River version. Each file also
// records its version in river_migration, the way River's migrator would,
// so River's own tooling sees a correctly migrated database.
//
// Usage:
//
//	go run ./internal/rivergen            # write migrations/sql/000NN_river_*.sql
//	go run ./internal/rivergen -check     # fail if the files drift from the pinned River
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"

	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivershared/sqlctemplate"
)

// Versions of River's main migration line that braid renders.
const (
	firstVersion = 1
	lastVersion  = 8
	// riverSeries is the River release series whose schema braid pins.
	riverSeries = "v0.51."
)

func main() {
	dir := flag.String("dir", "migrations/sql", "directory of the goose migration files")
	check := flag.Bool("check", false, "compare instead of writing; exit 1 on drift")
	flag.Parse()

	files, riverVersion, err := render()
	if err != nil {
		fmt.Fprintln(os.Stderr, "rivergen:", err)
		os.Exit(1)
	}
	if !strings.HasPrefix(riverVersion, riverSeries) {
		fmt.Fprintf(os.Stderr, "rivergen: go.mod pins River %s, but braid's schema is rendered from the %sx series\n", riverVersion, riverSeries)
		os.Exit(1)
	}
	if *check {
		if drift := compare(*dir, files); len(drift) > 0 {
			fmt.Fprintf(os.Stderr, "rivergen: %s drifted from River %s:\n  %s\nrun `go run ./internal/rivergen` to render them again\n",
				*dir, riverVersion, strings.Join(drift, "\n  "))
			os.Exit(1)
		}
		fmt.Printf("rivergen: %d River migration files match River %s\n", len(files), riverVersion)
		return
	}
	// Remove rendered files that no longer correspond to a River version.
	old, _ := filepath.Glob(filepath.Join(*dir, "000??_river_*.sql"))
	for _, f := range old {
		if _, ok := files[filepath.Base(f)]; !ok {
			if err := os.Remove(f); err != nil {
				fmt.Fprintln(os.Stderr, "rivergen:", err)
				os.Exit(1)
			}
		}
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(*dir, name), body, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "rivergen:", err)
			os.Exit(1)
		}
	}
	fmt.Printf("rivergen: wrote %d River migration files from River %s\n", len(files), riverVersion)
}

func compare(dir string, want map[string][]byte) []string {
	var drift []string
	have, _ := filepath.Glob(filepath.Join(dir, "000??_river_*.sql"))
	seen := map[string]bool{}
	for _, f := range have {
		name := filepath.Base(f)
		seen[name] = true
		body, err := os.ReadFile(f)
		switch {
		case err != nil:
			drift = append(drift, fmt.Sprintf("%s: %v", name, err))
		case want[name] == nil:
			drift = append(drift, name+": not a River migration of the pinned version")
		case !bytes.Equal(body, want[name]):
			drift = append(drift, name+": content differs")
		}
	}
	for name := range want {
		if !seen[name] {
			drift = append(drift, name+": missing")
		}
	}
	sort.Strings(drift)
	return drift
}

type migration struct {
	version  int
	name     string
	up, down string
}

func render() (map[string][]byte, string, error) {
	riverVersion := "unknown"
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == "github.com/riverqueue/river/riverdriver/riverpgxv5" {
				riverVersion = dep.Version
			}
		}
	}

	migrationFS := riverpgxv5.New(nil).GetMigrationFS("main")
	byVersion := map[int]*migration{}
	err := fs.WalkDir(migrationFS, "migration/main", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		base := filepath.Base(path)
		versionStr, rest, ok := strings.Cut(base, "_")
		if !ok {
			return fmt.Errorf("unexpected migration file name %q", base)
		}
		version, err := strconv.Atoi(versionStr)
		if err != nil {
			return fmt.Errorf("unexpected migration file name %q: %w", base, err)
		}
		if version < firstVersion || version > lastVersion {
			return nil
		}
		body, err := fs.ReadFile(migrationFS, path)
		if err != nil {
			return err
		}
		m := byVersion[version]
		if m == nil {
			m = &migration{version: version}
			byVersion[version] = m
		}
		switch {
		case strings.HasSuffix(rest, ".up.sql"):
			m.name = strings.TrimSuffix(rest, ".up.sql")
			m.up = string(body)
		case strings.HasSuffix(rest, ".down.sql"):
			m.down = string(body)
		default:
			return fmt.Errorf("unexpected migration file name %q", base)
		}
		return nil
	})
	if err != nil {
		return nil, "", err
	}

	files := map[string][]byte{}
	for v := firstVersion; v <= lastVersion; v++ {
		m := byVersion[v]
		if m == nil || m.up == "" || m.down == "" {
			return nil, "", fmt.Errorf("River %s has no complete migration %03d", riverVersion, v)
		}
		up, err := renderSQL(m.up)
		if err != nil {
			return nil, "", fmt.Errorf("rendering %03d up: %w", v, err)
		}
		down, err := renderSQL(m.down)
		if err != nil {
			return nil, "", fmt.Errorf("rendering %03d down: %w", v, err)
		}
		name := fmt.Sprintf("%05d_river_%s.sql", v, m.name)
		files[name] = goose(riverVersion, m, up, down)
	}
	return files, riverVersion, nil
}

// renderSQL fills River's template markers for the default schema, exactly
// as River's own migrator does.
func renderSQL(sql string) (string, error) {
	if !strings.Contains(sql, "/* TEMPLATE") {
		return sql, nil
	}
	var replacer sqlctemplate.Replacer
	ctx := sqlctemplate.WithReplacements(context.Background(), map[string]sqlctemplate.Replacement{
		"schema": {Value: ""},
	}, nil)
	out, _, err := replacer.RunSafely(ctx, "$", sql, nil)
	if err != nil {
		return "", err
	}
	if strings.Contains(out, "/* TEMPLATE") {
		return "", fmt.Errorf("unrendered template marker remains")
	}
	return out, nil
}

// goose wraps one River version as a goose migration that also records the
// version in river_migration (whose shape changes at version 5).
func goose(riverVersion string, m *migration, up, down string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "-- Code generated by rivergen from River %s, main line, version %03d (%s). DO NOT EDIT.\n\n", riverVersion, m.version, m.name)
	b.WriteString("-- +goose Up\n-- +goose StatementBegin\n")
	b.WriteString(strings.TrimSpace(up))
	b.WriteString("\n")
	if m.version >= 5 {
		fmt.Fprintf(&b, "INSERT INTO river_migration (line, version) VALUES ('main', %d);\n", m.version)
	} else {
		fmt.Fprintf(&b, "INSERT INTO river_migration (version) VALUES (%d);\n", m.version)
	}
	b.WriteString("-- +goose StatementEnd\n\n-- +goose Down\n-- +goose StatementBegin\n")
	switch {
	case m.version >= 5:
		fmt.Fprintf(&b, "DELETE FROM river_migration WHERE line = 'main' AND version = %d;\n", m.version)
	case m.version > 1:
		fmt.Fprintf(&b, "DELETE FROM river_migration WHERE version = %d;\n", m.version)
	}
	b.WriteString(strings.TrimSpace(down))
	b.WriteString("\n-- +goose StatementEnd\n")
	return []byte(b.String())
}
