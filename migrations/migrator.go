package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed sql/*.sql
var embedded embed.FS

// FS returns braid's migration files (River's rendered schema and braid's
// tables), rooted so that the .sql files are at the top level.
func FS() fs.FS {
	sub, err := fs.Sub(embedded, "sql")
	if err != nil {
		panic(err) // the embed pattern guarantees the directory exists
	}
	return sub
}

// TableDefault is the table in which braid records its applied versions.
const TableDefault = "braid_schema_version"

// Config describes a set of migrations.
type Config struct {
	// FS holds goose SQL files at its top level. Default: braid's own
	// migrations (FS()).
	FS fs.FS

	// Table records the applied versions. Default TableDefault. Give each
	// set of migrations its own table.
	Table string
}

// Migrator applies one set of goose migrations to one database.
type Migrator struct {
	db       *sql.DB
	provider *goose.Provider
}

// Result is the outcome of applying or reverting one version.
type Result struct {
	Version   int64
	Name      string
	Direction string // "up" or "down"
	Duration  time.Duration
}

// VersionStatus is one version and whether it is applied.
type VersionStatus struct {
	Version   int64
	Name      string
	Applied   bool
	AppliedAt time.Time
}

// New returns a migrator over pool. Close it when done.
func New(pool *pgxpool.Pool, cfg *Config) (*Migrator, error) {
	if pool == nil {
		return nil, errors.New("migrations: pool is nil")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.FS == nil {
		c.FS = FS()
	}
	if c.Table == "" {
		c.Table = TableDefault
	}
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	db := stdlib.OpenDBFromPool(pool)
	provider, err := goose.NewProvider(goose.DialectPostgres, db, c.FS,
		goose.WithTableName(c.Table),
		goose.WithSessionLocker(locker),
	)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return &Migrator{db: db, provider: provider}, nil
}

// Close releases the migrator's connection handle. The pool stays open.
func (m *Migrator) Close() error { return m.db.Close() }

// ErrNewerSchema is matched by a *NewerSchemaError.
var ErrNewerSchema = errors.New("migrations: the database's schema is newer than these migrations")

// NewerSchemaError is the error of Down, DownTo and Redo, and of CheckNotNewer,
// on a database that a newer set of migrations brought past the last of
// this one's: reverting what this set does not know would be a guess.
type NewerSchemaError struct {
	// Version is the database's; Latest, the last of these migrations.
	Version, Latest int64
}

func (e *NewerSchemaError) Error() string {
	return fmt.Sprintf("migrations: the database's schema is at version %d, newer than the last one these migrations know, %d: use the migrations that brought it there", e.Version, e.Latest)
}

// Is reports whether target is ErrNewerSchema.
func (e *NewerSchemaError) Is(target error) bool { return target == ErrNewerSchema }

// Latest returns the last version of these migrations.
func (m *Migrator) Latest() int64 {
	var latest int64
	for _, s := range m.provider.ListSources() {
		latest = max(latest, s.Version)
	}
	return latest
}

// CheckNotNewer returns a *NewerSchemaError when the database's schema is
// past the last of these migrations, and nil otherwise. Up applies
// nothing to such a database, and reports nothing: a process of an older
// version may run on a schema that a newer one extended. An operator who
// migrates by hand wants to hear of it.
func (m *Migrator) CheckNotNewer(ctx context.Context) error {
	v, err := m.Version(ctx)
	if err != nil {
		return err
	}
	if latest := m.Latest(); v > latest {
		return &NewerSchemaError{Version: v, Latest: latest}
	}
	return nil
}

// Up applies every pending version.
func (m *Migrator) Up(ctx context.Context) ([]Result, error) {
	res, err := m.provider.Up(ctx)
	return results(res), wrap(err)
}

// Down reverts the most recently applied version.
func (m *Migrator) Down(ctx context.Context) ([]Result, error) {
	if err := m.CheckNotNewer(ctx); err != nil {
		return nil, err
	}
	res, err := m.provider.Down(ctx)
	if res == nil {
		return nil, wrap(err)
	}
	return results([]*goose.MigrationResult{res}), wrap(err)
}

// DownTo reverts every applied version above version. DownTo(ctx, 0)
// reverts everything.
func (m *Migrator) DownTo(ctx context.Context, version int64) ([]Result, error) {
	if err := m.CheckNotNewer(ctx); err != nil {
		return nil, err
	}
	res, err := m.provider.DownTo(ctx, version)
	return results(res), wrap(err)
}

// Redo reverts the most recently applied version and applies it again.
func (m *Migrator) Redo(ctx context.Context) ([]Result, error) {
	down, err := m.Down(ctx)
	if err != nil {
		return down, err
	}
	if len(down) == 0 {
		return nil, errors.New("migrations: nothing to redo: no version is applied")
	}
	up, err := m.provider.UpByOne(ctx)
	if up == nil {
		return down, wrap(err)
	}
	return append(down, results([]*goose.MigrationResult{up})...), wrap(err)
}

// Status lists every known version and whether it is applied; and last,
// when the database's schema is past them (see CheckNotNewer), its version,
// applied and named as unknown.
func (m *Migrator) Status(ctx context.Context) ([]VersionStatus, error) {
	sts, err := m.provider.Status(ctx)
	if err != nil {
		return nil, wrap(err)
	}
	out := make([]VersionStatus, 0, len(sts)+1)
	for _, s := range sts {
		out = append(out, VersionStatus{
			Version:   s.Source.Version,
			Name:      s.Source.Path,
			Applied:   s.State == goose.StateApplied,
			AppliedAt: s.AppliedAt,
		})
	}
	var newer *NewerSchemaError
	if err := m.CheckNotNewer(ctx); errors.As(err, &newer) {
		out = append(out, VersionStatus{Version: newer.Version, Name: UnknownVersionName, Applied: true})
	} else if err != nil {
		return nil, err
	}
	return out, nil
}

// UnknownVersionName is the Name in Status of a database's version that
// these migrations do not know.
const UnknownVersionName = "(unknown: applied by newer migrations)"

// Version returns the highest applied version, or 0.
func (m *Migrator) Version(ctx context.Context) (int64, error) {
	v, err := m.provider.GetDBVersion(ctx)
	return v, wrap(err)
}

func results(rs []*goose.MigrationResult) []Result {
	out := make([]Result, 0, len(rs))
	for _, r := range rs {
		if r == nil || r.Source == nil {
			continue
		}
		out = append(out, Result{Version: r.Source.Version, Name: r.Source.Path, Direction: r.Direction, Duration: r.Duration})
	}
	return out
}

func wrap(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("migrations: %w", err)
}

// Up applies every pending braid migration to pool.
func Up(ctx context.Context, pool *pgxpool.Pool) error {
	return with(pool, func(m *Migrator) error { _, err := m.Up(ctx); return err })
}

// Down reverts the most recently applied braid migration.
func Down(ctx context.Context, pool *pgxpool.Pool) error {
	return with(pool, func(m *Migrator) error { _, err := m.Down(ctx); return err })
}

// Status lists braid's migrations and whether each is applied.
func Status(ctx context.Context, pool *pgxpool.Pool) ([]VersionStatus, error) {
	var out []VersionStatus
	err := with(pool, func(m *Migrator) error {
		var err error
		out, err = m.Status(ctx)
		return err
	})
	return out, err
}

func with(pool *pgxpool.Pool, fn func(*Migrator) error) error {
	m, err := New(pool, nil)
	if err != nil {
		return err
	}
	defer m.Close()
	return fn(m)
}
