package main

import (
	"context"
	"encoding/json"

	"github.com/braidflow/braid/workflow"
)

// runsExport prints a run's recorded history as JSON, the file that
// testutil.Replay and workflow.Replay replay code against.
func runsExport(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("runs export")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	id, err := runID(rest)
	if err != nil {
		return err
	}
	pool, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	h, err := workflow.ExportRun(ctx, pool, id)
	if err != nil {
		return runError(ctx, pool, id, err)
	}
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(h)
}
