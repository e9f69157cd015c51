package feedfetcher

import (
	"context"
	"embed"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/migrations"
)

// MigrationsTable records the versions of the feed reader's own migrations,
// apart from braid's braid_schema_version.
const MigrationsTable = "feedfetcher_schema_version"

//go:embed migrations/*.sql
var migrationFiles embed.FS

// MigrationsFS returns the feed reader's goose migrations, rooted so that the
// .sql files are at the top level.
func MigrationsFS() fs.FS {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil { // unreachable: the directory is embedded
		panic(err)
	}
	return sub
}

// Migrate applies braid's migrations, then the feed reader's own, recorded
// in MigrationsTable. It is safe to call on a database that is already up
// to date, and from several processes at once.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	if err := migrations.Up(ctx, pool); err != nil {
		return fmt.Errorf("feedfetcher: migrating braid's schema: %w", err)
	}
	m, err := migrations.New(pool, &migrations.Config{FS: MigrationsFS(), Table: MigrationsTable})
	if err != nil {
		return fmt.Errorf("feedfetcher: %w", err)
	}
	defer m.Close()
	if _, err := m.Up(ctx); err != nil {
		return fmt.Errorf("feedfetcher: migrating the feed reader's schema: %w", err)
	}
	return nil
}
