package migrations_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/braidflow/braid/migrations"
	"github.com/braidflow/braid/testutil"
)

// schemaSQL describes the public schema in full: columns with their types,
// defaults and nullability, constraints, indexes, triggers, functions,
// types and sequences, each as one line.
const schemaSQL = `
	SELECT 'column ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod) ||
	       CASE WHEN a.attnotnull THEN ' not null' ELSE '' END ||
	       COALESCE(' default ' || pg_get_expr(d.adbin, d.adrelid), '') ||
	       CASE WHEN a.attidentity <> '' THEN ' identity ' || a.attidentity::text ELSE '' END ||
	       CASE WHEN a.attgenerated <> '' THEN ' generated' ELSE '' END
	  FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
	  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
	 WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'v', 'm') AND a.attnum > 0 AND NOT a.attisdropped
	   AND c.relname NOT IN ('braid_schema_version', 'goose_db_version')
	UNION ALL
	SELECT 'constraint ' || c.relname || '.' || k.conname || ' ' || pg_get_constraintdef(k.oid)
	  FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
	 WHERE n.nspname = 'public' AND c.relname NOT IN ('braid_schema_version', 'goose_db_version')
	UNION ALL
	SELECT 'index ' || pg_get_indexdef(i.indexrelid)
	  FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace
	 WHERE n.nspname = 'public' AND c.relname NOT IN ('braid_schema_version', 'goose_db_version')
	UNION ALL
	SELECT 'trigger ' || pg_get_triggerdef(t.oid)
	  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
	 WHERE n.nspname = 'public' AND NOT t.tgisinternal
	UNION ALL
	SELECT 'function ' || p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ') ' || md5(pg_get_functiondef(p.oid))
	  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
	 WHERE n.nspname = 'public' AND p.prokind IN ('f', 'p')
	UNION ALL
	SELECT 'type ' || t.typname || ' ' || COALESCE((SELECT string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder) FROM pg_enum e WHERE e.enumtypid = t.oid), '')
	  FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
	 WHERE n.nspname = 'public' AND t.typtype IN ('e', 'd')
	UNION ALL
	SELECT 'relation ' || c.relkind::text || ' ' || c.relname || ' ' || COALESCE(array_to_string(c.reloptions, ','), '')
	  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
	 WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
	   AND c.relname NOT IN ('braid_schema_version', 'goose_db_version', 'braid_schema_version_id_seq')
	ORDER BY 1`

func schema(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), schemaSQL)
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

// TestEachVersionDownUndoesItsUp applies the versions one at a time, from
// nothing, and checks that each of braid's versions' Down leaves the schema as it was
// before its Up, and that its Up applied again gives back the schema it
// gave the first time.
func TestEachVersionDownUndoesItsUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testutil.DB(t) // fully migrated
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS(), goose.WithTableName(migrations.TableDefault))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(ctx, 0); err != nil {
		t.Fatal(err)
	}
	for _, v := range embeddedVersions(t) {
		if v < 100 {
			// River's own versions are rendered as River wrote them
			// (its version 4's Down keeps an enum value PostgreSQL
			// cannot drop); only braid's are checked.
			if _, err := p.UpByOne(ctx); err != nil {
				t.Fatalf("Up of %d: %v", v, err)
			}
			continue
		}
		before := schema(t, pool)
		if _, err := p.UpByOne(ctx); err != nil {
			t.Fatalf("Up of %d: %v", v, err)
		}
		up := schema(t, pool)
		if _, err := p.Down(ctx); err != nil {
			t.Fatalf("Down of %d: %v", v, err)
		}
		if diff := cmp.Diff(before, schema(t, pool)); diff != "" {
			t.Errorf("schema after Up and Down of version %d (-before Up +after Down):\n%s", v, diff)
		}
		if _, err := p.UpByOne(ctx); err != nil {
			t.Fatalf("Up of %d again: %v", v, err)
		}
		if diff := cmp.Diff(up, schema(t, pool)); diff != "" {
			t.Errorf("schema after Up, Down and Up of version %d (-first Up +second Up):\n%s", v, diff)
		}
	}
}
