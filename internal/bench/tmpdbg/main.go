package main

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"

	"github.com/braidflow/braid/internal/localpg"
)

func main() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "dbg")
	defer os.RemoveAll(dir)
	c, err := localpg.New(localpg.Config{Dir: dir, Settings: map[string]string{"shared_preload_libraries": "pg_stat_statements"}})
	if err != nil {
		panic(err)
	}
	if err := c.Start(ctx); err != nil {
		panic(err)
	}
	defer c.Stop()
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		panic(err)
	}
	var s string
	conn.QueryRow(ctx, "SHOW shared_preload_libraries").Scan(&s)
	fmt.Println("spl:", s)
	_, err = conn.Exec(ctx, "CREATE EXTENSION pg_stat_statements")
	fmt.Println(err)
	conn.Exec(ctx, "SELECT 1")
	var n int
	err = conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_statements").Scan(&n)
	fmt.Println(n, err)
	conn.QueryRow(ctx, "SHOW pg_stat_statements.track").Scan(&s)
	fmt.Println("track:", s)
}
