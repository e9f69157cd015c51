package workflow

import "context"

// DeleteOldRuns runs one retention pass.
func DeleteOldRuns(ctx context.Context, e *Engine) error { return e.deleteOldRuns(ctx) }

// DeleteOldRunsBatch runs one retention batch of at most taskLimit tasks
// (but at least one run), and returns how many runs it deleted.
func DeleteOldRunsBatch(ctx context.Context, e *Engine, taskLimit int) (int, error) {
	before, err := e.retentionCutoff(ctx)
	if err != nil {
		return 0, err
	}
	b, err := e.deleteOldRunsBatch(ctx, before, nil, taskLimit)
	return b.deleted, err
}
