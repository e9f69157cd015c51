package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// InsertOpts are River's insert options plus braid's. Every field of
// river.InsertOpts applies as River applies it, except Priority: zero means
// the args' own InsertOpts priority, else PriorityNormal (River's default
// would be 1, PriorityCritical).
//
//	q.Insert(ctx, SendEmail{To: "a@example.com"}, &queue.InsertOpts{
//		InsertOpts:     river.InsertOpts{Queue: "mail", Priority: int(queue.PriorityHigh)},
//		IdempotencyKey: "welcome:a@example.com",
//	})
type InsertOpts struct {
	river.InsertOpts

	// IdempotencyKey makes the insert idempotent: while a job of the same
	// kind inserted with the same key exists, in any state, inserting again
	// inserts nothing and returns that job, with UniqueSkippedAsDuplicate
	// set. Keys are scoped to the job kind, and are at most
	// IdempotencyKeyMaxLength characters.
	//
	// The key is mapped onto River's unique jobs: it becomes the job's
	// unique key (replacing any UniqueOpts from the args, and exclusive with
	// UniqueOpts here), with uniqueness in every state, and is kept in the
	// job's metadata under MetadataIdempotencyKey. Concurrent inserts with
	// one key are safe: PostgreSQL's unique index decides, and every caller
	// gets the same job.
	//
	// Retention: the key holds for as long as the job row exists. River
	// deletes finished jobs after Config.CompletedJobRetentionPeriod
	// (completed, 24 h by default), CancelledJobRetentionPeriod (24 h) and
	// DiscardedJobRetentionPeriod (dead letters, 7 days); after that the
	// same key inserts a new job. A transaction that inserted a key and
	// rolled back leaves the key free.
	IdempotencyKey string
}

// InsertManyParams is one job of InsertMany.
type InsertManyParams struct {
	Args       river.JobArgs
	InsertOpts *InsertOpts
}

// Insert inserts a job with braid's defaults (see InsertOpts). The result's
// Job is the inserted job or, for a repeated idempotency key, the existing
// one.
func (q *Queue) Insert(ctx context.Context, args river.JobArgs, opts *InsertOpts) (*rivertype.JobInsertResult, error) {
	ro, err := riverInsertOpts(args, opts)
	if err != nil {
		return nil, err
	}
	res, err := q.client.Insert(ctx, args, ro)
	if err != nil {
		return nil, fmt.Errorf("queue: inserting a %q job: %w", kindOf(args), err)
	}
	return res, nil
}

// InsertTx is Insert within tx: the job exists only if tx commits.
func (q *Queue) InsertTx(ctx context.Context, tx pgx.Tx, args river.JobArgs, opts *InsertOpts) (*rivertype.JobInsertResult, error) {
	ro, err := riverInsertOpts(args, opts)
	if err != nil {
		return nil, err
	}
	res, err := q.client.InsertTx(ctx, tx, args, ro)
	if err != nil {
		return nil, fmt.Errorf("queue: inserting a %q job: %w", kindOf(args), err)
	}
	return res, nil
}

// InsertMany inserts several jobs in one statement, with braid's defaults.
// Results are in the order of params.
func (q *Queue) InsertMany(ctx context.Context, params []InsertManyParams) ([]*rivertype.JobInsertResult, error) {
	rp, err := riverManyParams(params)
	if err != nil {
		return nil, err
	}
	res, err := q.client.InsertMany(ctx, rp)
	if err != nil {
		return nil, fmt.Errorf("queue: inserting %d jobs: %w", len(params), err)
	}
	return res, nil
}

// InsertManyTx is InsertMany within tx.
func (q *Queue) InsertManyTx(ctx context.Context, tx pgx.Tx, params []InsertManyParams) ([]*rivertype.JobInsertResult, error) {
	rp, err := riverManyParams(params)
	if err != nil {
		return nil, err
	}
	res, err := q.client.InsertManyTx(ctx, tx, rp)
	if err != nil {
		return nil, fmt.Errorf("queue: inserting %d jobs: %w", len(params), err)
	}
	return res, nil
}

func riverManyParams(params []InsertManyParams) ([]river.InsertManyParams, error) {
	out := make([]river.InsertManyParams, len(params))
	for i, p := range params {
		ro, err := riverInsertOpts(p.Args, p.InsertOpts)
		if err != nil {
			return nil, fmt.Errorf("queue: job %d of the batch: %w", i, err)
		}
		out[i] = river.InsertManyParams{Args: p.Args, InsertOpts: ro}
	}
	return out, nil
}

func kindOf(args river.JobArgs) string {
	if args == nil {
		return "<nil>"
	}
	return args.Kind()
}

// riverInsertOpts turns braid's options into River's: the default priority,
// and the idempotency key in the metadata.
func riverInsertOpts(args river.JobArgs, opts *InsertOpts) (*river.InsertOpts, error) {
	if args == nil {
		return nil, errors.New("queue: inserting a job needs non-nil args")
	}
	var ro river.InsertOpts
	var key string
	if opts != nil {
		ro = opts.InsertOpts
		key = opts.IdempotencyKey
	}
	if ro.Priority == 0 {
		if wo, ok := args.(river.JobArgsWithInsertOpts); !ok || wo.InsertOpts().Priority == 0 {
			ro.Priority = int(PriorityDefault)
		}
	} else if err := Priority(ro.Priority).Validate(); err != nil {
		return nil, err
	}
	if key != "" {
		if err := validateIdempotencyKey(key); err != nil {
			return nil, err
		}
		if u := ro.UniqueOpts; u.ByArgs || u.ByPeriod != 0 || u.ByQueue || u.ByState != nil || u.ExcludeKind {
			return nil, fmt.Errorf("queue: a %q job has both an IdempotencyKey and UniqueOpts; use one", args.Kind())
		}
		md := map[string]json.RawMessage{}
		if len(ro.Metadata) > 0 {
			if err := json.Unmarshal(ro.Metadata, &md); err != nil || md == nil {
				return nil, fmt.Errorf("queue: InsertOpts.Metadata of a %q job is not a JSON object", args.Kind())
			}
		}
		b, err := json.Marshal(key)
		if err != nil {
			return nil, err
		}
		md[MetadataIdempotencyKey] = b
		if ro.Metadata, err = json.Marshal(md); err != nil {
			return nil, err
		}
	}
	return &ro, nil
}
