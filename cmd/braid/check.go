package main

import (
	"context"

	"github.com/braidflow/braid/check"
	"github.com/braidflow/braid/workflow"
)

func init() {
	register(&command{
		name:    "check",
		summary: "replay unfinished runs against the workflows of this binary and list those that would diverge",
		run:     runCheck,
	})
}

// checkWorkflows are the workflows that `braid check` replays with. The
// stock binary registers none: a replay runs workflow code, so a service
// builds the check into its own binary (package check), and this command
// says so.
var checkWorkflows []workflow.Definition

func runCheck(ctx context.Context, c *cli, args []string) error {
	if code := check.Run(ctx, args, c.stdout, c.stderr, checkWorkflows...); code != 0 {
		return exitStatus(code)
	}
	return nil
}
