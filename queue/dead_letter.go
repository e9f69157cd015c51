package queue

import (
	"context"
	"fmt"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

const (
	// ListLimitDefault is the number of jobs Jobs and DeadLetters return when
	// their filter sets no Limit.
	ListLimitDefault = 100

	// ListLimitMax is the largest Limit Jobs and DeadLetters accept (River's
	// own limit for one page).
	ListLimitMax = 10_000
)

// DeadLetter is a job that exhausted its attempts (River's discarded
// state). It stays inspectable until River's DiscardedJobRetentionPeriod
// deletes it (a workflow's turn job goes sooner when the engine's
// retention deletes its run), and Retry runs it again.
type DeadLetter struct {
	// JobRow is the discarded job, with every attempt's error in Errors;
	// for an attempt that panicked, the error's Trace holds the stack.
	*rivertype.JobRow

	// LastError is the final attempt's error, the one that made the job a
	// dead letter.
	LastError rivertype.AttemptError
}

// DeadLetterFilter selects dead letters. Empty fields match everything.
type DeadLetterFilter struct {
	// Kind keeps only jobs of this kind.
	Kind string
	// Queue keeps only jobs of this queue.
	Queue string
	// Limit is the most dead letters returned, newest first. Defaults to
	// ListLimitDefault; at most ListLimitMax.
	Limit int
}

// DeadLetters lists discarded jobs with their errors, most recently
// discarded first.
func (q *Queue) DeadLetters(ctx context.Context, filter DeadLetterFilter) ([]DeadLetter, error) {
	limit, err := listLimit(filter.Limit)
	if err != nil {
		return nil, err
	}
	params := river.NewJobListParams().
		States(rivertype.JobStateDiscarded).
		OrderBy(river.JobListOrderByFinalizedAt, river.SortOrderDesc).
		First(limit)
	if filter.Kind != "" {
		params = params.Kinds(filter.Kind)
	}
	if filter.Queue != "" {
		params = params.Queues(filter.Queue)
	}
	res, err := q.client.JobList(ctx, params)
	if err != nil {
		return nil, fmt.Errorf("queue: listing dead letters: %w", err)
	}
	out := make([]DeadLetter, len(res.Jobs))
	for i, j := range res.Jobs {
		out[i].JobRow = j
		if n := len(j.Errors); n > 0 {
			out[i].LastError = j.Errors[n-1]
		}
	}
	return out, nil
}

func listLimit(limit int) (int, error) {
	switch {
	case limit == 0:
		return ListLimitDefault, nil
	case limit < 0 || limit > ListLimitMax:
		return 0, fmt.Errorf("queue: list limit %d is out of range; it must be 1 to %d (or zero for %d)", limit, ListLimitMax, ListLimitDefault)
	}
	return limit, nil
}
