package workflow

import (
	"context"

	"github.com/google/uuid"
)

// DeleteOldRuns runs one retention pass.
func DeleteOldRuns(ctx context.Context, e *Engine) error { return e.deleteOldRuns(ctx) }

// DeleteOldRunsBy runs one retention pass of batches of at most taskLimit
// tasks.
func DeleteOldRunsBy(ctx context.Context, e *Engine, taskLimit int) error {
	return e.deleteOldRunsBy(ctx, taskLimit)
}

// DeleteOldRunsBatch runs one retention batch of at most taskLimit tasks,
// and returns how many runs it deleted, or the run it found to hold more
// tasks than that alone, to shrink first.
func DeleteOldRunsBatch(ctx context.Context, e *Engine, taskLimit int) (int, string, error) {
	before, err := e.retentionCutoff(ctx)
	if err != nil {
		return 0, "", err
	}
	b, err := e.deleteOldRunsBatch(ctx, before, nil, taskLimit)
	large := ""
	if b.large != uuid.Nil {
		large = b.large.String()
	}
	return b.deleted, large, err
}

// ShrinkRun shrinks an old finished run to taskLimit tasks at most, as a
// retention pass does, and reports whether it could.
func ShrinkRun(ctx context.Context, e *Engine, runID string, taskLimit int) (bool, error) {
	id, err := uuid.Parse(runID)
	if err != nil {
		return false, err
	}
	before, err := e.retentionCutoff(ctx)
	if err != nil {
		return false, err
	}
	return e.shrinkRun(ctx, id, before, taskLimit)
}
