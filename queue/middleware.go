package queue

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

const (
	// MetadataTrace is the job metadata key under which the insert
	// middleware stores the W3C trace context (an object with "traceparent"
	// and, when present, "tracestate") of the inserting context.
	MetadataTrace = "braid_trace"

	// MetadataIdempotencyKey is the job metadata key that carries an
	// idempotency key. Queue.Insert sets it from InsertOpts.IdempotencyKey;
	// an insert made through River directly with this key in its metadata
	// behaves the same way.
	MetadataIdempotencyKey = "braid_idempotency_key"

	// metadataAgedAt records when aging last raised a job's priority.
	metadataAgedAt = "braid_aged_at"
)

// w3c is the propagator for the trace context kept in job metadata. It is
// fixed to W3C Trace Context, whatever global propagator the process set,
// so that every process reads what every other wrote.
var w3c = propagation.TraceContext{}

// middleware is braid's River middleware: on insert it stores the trace
// context and applies idempotency keys; around each attempt it starts the
// attempt span, records metrics, and puts the job context in ctx.
type middleware struct {
	river.MiddlewareDefaults
	q *Queue
}

var (
	_ rivertype.JobInsertMiddleware = (*middleware)(nil)
	_ rivertype.WorkerMiddleware    = (*middleware)(nil)
)

// InsertMany implements rivertype.JobInsertMiddleware.
func (m *middleware) InsertMany(ctx context.Context, manyParams []*rivertype.JobInsertParams, doInner func(context.Context) ([]*rivertype.JobInsertResult, error)) ([]*rivertype.JobInsertResult, error) {
	var carrier propagation.MapCarrier
	if trace.SpanContextFromContext(ctx).IsValid() {
		carrier = propagation.MapCarrier{}
		w3c.Inject(ctx, carrier)
	}
	var seen map[string]bool
	for _, p := range manyParams {
		key, err := prepareInsert(p, carrier)
		if err != nil {
			return nil, err
		}
		if key == "" {
			continue
		}
		if seen == nil {
			seen = make(map[string]bool)
		}
		id := p.Kind + "\x00" + key
		if seen[id] {
			return nil, fmt.Errorf("queue: idempotency key %q appears twice for kind %q in one batch", key, p.Kind)
		}
		seen[id] = true
	}
	return doInner(ctx)
}

// prepareInsert adds the trace context to p's metadata and turns an
// idempotency key in it into River's unique key. It returns the key.
func prepareInsert(p *rivertype.JobInsertParams, carrier propagation.MapCarrier) (string, error) {
	hasKey := bytes.Contains(p.Metadata, []byte(`"`+MetadataIdempotencyKey+`"`))
	if len(carrier) == 0 && !hasKey {
		return "", nil
	}
	md := map[string]json.RawMessage{}
	if len(p.Metadata) > 0 {
		if err := json.Unmarshal(p.Metadata, &md); err != nil {
			return "", fmt.Errorf("queue: metadata of a %q job is not a JSON object: %w", p.Kind, err)
		}
		if md == nil {
			md = map[string]json.RawMessage{}
		}
	}
	changed := false
	if _, ok := md[MetadataTrace]; !ok && len(carrier) > 0 {
		b, err := json.Marshal(carrier)
		if err != nil {
			return "", err
		}
		md[MetadataTrace] = b
		changed = true
	}
	var key string
	if raw, ok := md[MetadataIdempotencyKey]; ok {
		if err := json.Unmarshal(raw, &key); err != nil {
			return "", fmt.Errorf("queue: metadata %s of a %q job must be a string: %w", MetadataIdempotencyKey, p.Kind, err)
		}
		if err := validateIdempotencyKey(key); err != nil {
			return "", err
		}
		sum := sha256.Sum256([]byte("braid/idempotency\x00" + p.Kind + "\x00" + key))
		p.UniqueKey = sum[:]
		p.UniqueStates = allStatesBitmask
	}
	if changed {
		b, err := json.Marshal(md)
		if err != nil {
			return "", err
		}
		p.Metadata = b
	}
	return key, nil
}

// allStatesBitmask is River's unique_states bitmask with every job state
// set: an idempotency key holds while its job exists in any state.
const allStatesBitmask byte = 0xFF

// IdempotencyKeyMaxLength is the longest idempotency key accepted, in
// characters.
const IdempotencyKeyMaxLength = 500

func validateIdempotencyKey(key string) error {
	switch {
	case key == "":
		return errors.New("queue: idempotency key is empty")
	case !utf8.ValidString(key):
		return fmt.Errorf("queue: idempotency key %q is not valid UTF-8", key)
	case utf8.RuneCountInString(key) > IdempotencyKeyMaxLength:
		return fmt.Errorf("queue: idempotency key is %d characters; the limit is %d", utf8.RuneCountInString(key), IdempotencyKeyMaxLength)
	case bytes.IndexByte([]byte(key), 0) >= 0:
		return fmt.Errorf("queue: idempotency key %q contains a NUL character", key)
	}
	return nil
}

// TraceContext returns ctx carrying, as its remote parent, the span context
// that was current when job was inserted (stored under MetadataTrace). A
// worker of an UntracedKinds kind starts its own attempt span from it. When
// the job carries no trace context, ctx is returned unchanged.
func TraceContext(ctx context.Context, job *rivertype.JobRow) context.Context {
	if job == nil || !bytes.Contains(job.Metadata, []byte(`"`+MetadataTrace+`"`)) {
		return ctx
	}
	var md struct {
		Trace map[string]string `json:"braid_trace"`
	}
	if err := json.Unmarshal(job.Metadata, &md); err != nil || len(md.Trace) == 0 {
		return ctx
	}
	return w3c.Extract(ctx, propagation.MapCarrier(md.Trace))
}

// Work implements rivertype.WorkerMiddleware.
func (m *middleware) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	_, err := m.q.attempt(ctx, job, doInner, false)
	return err
}

// attempt runs one attempt of job around doInner: its span, its metrics,
// the job context (heartbeats, progress, the ownership watch). claimed is
// true for a job this process claimed itself (WorkClaimed), whose outcome
// River's completer never sees. superseded reports that the attempt lost
// its job. A panic in doInner is re-raised after the attempt is accounted
// for.
func (q *Queue) attempt(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error, claimed bool) (superseded bool, err error) {
	start := time.Now()
	attrs := metric.WithAttributes(attribute.String("job.kind", job.Kind), attribute.String("queue", job.Queue))
	q.metrics.attempts.Add(ctx, 1, attrs)

	var span trace.Span
	if !q.untraced[job.Kind] {
		ctx, span = q.tracer.Start(TraceContext(ctx, job), "river.job "+job.Kind,
			trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(
				attribute.Int64("job.id", job.ID),
				attribute.String("job.kind", job.Kind),
				attribute.String("queue", job.Queue),
				attribute.Int("attempt", job.Attempt),
				attribute.Int("priority", job.Priority),
			))
	}

	ctx, cancel := context.WithCancelCause(ctx)
	jc := &jobContext{q: q, job: job, cancel: cancel, interval: q.intervals[job.Kind], start: start, claimed: claimed}
	workCtx := ctx
	ctx = context.WithValue(ctx, jobContextKey{}, jc)
	stopWatch := func() {}
	if jc.interval > 0 {
		stopWatch = jc.watch(ctx)
	}

	panicking := true
	defer func() {
		var pv any
		if panicking {
			pv = recover()
		}
		stopWatch()
		superseded = jc.supersededOnReturn(workCtx, panicking, err)
		if jc.cancelRequested.Load() && err != nil && !superseded {
			// The job was cancelled while it ran: record it so.
			err = river.JobCancel(err)
		}
		cancel(nil)
		if jc.touched.Load() && !superseded {
			jc.clear()
		}

		outcome, errType := "completed", ""
		var recErr error
		var snooze *rivertype.JobSnoozeError
		var cancelled *rivertype.JobCancelError
		var recovered *PanicError
		switch {
		case panicking && pv == nil:
			// runtime.Goexit: nothing to record but the span's end.
			outcome = "exited"
		case panicking:
			outcome, errType = "panicked", "panic"
			recErr = fmt.Errorf("panic: %v", pv)
		case superseded:
			outcome = "superseded"
		case err == nil:
		case errors.As(err, &snooze):
			outcome = "snoozed"
		case errors.As(err, &cancelled):
			outcome, errType, recErr = "cancelled", "cancel", err
		case errors.As(err, &recovered):
			// A panic recovered inside: its stack is in the error.
			outcome, errType, recErr = "panicked", "panic", err
		default:
			outcome, errType, recErr = "failed", "error", err
		}
		mctx := context.WithoutCancel(ctx)
		if errType != "" {
			q.metrics.failures.Add(mctx, 1, metric.WithAttributes(
				attribute.String("job.kind", job.Kind), attribute.String("queue", job.Queue),
				attribute.String("error.type", errType)))
		}
		end := jc.end()
		q.metrics.duration.Record(mctx, end.Sub(start).Seconds(), metric.WithAttributes(
			attribute.String("job.kind", job.Kind), attribute.String("queue", job.Queue),
			attribute.String("outcome", outcome)))
		if span != nil {
			span.SetAttributes(attribute.String("outcome", outcome))
			if recErr != nil {
				span.RecordError(recErr, trace.WithStackTrace(errType == "panic"))
				span.SetStatus(codes.Error, recErr.Error())
			}
			span.End(trace.WithTimestamp(end))
		}
		if panicking && pv != nil {
			// River records the panic, with its stack, as the attempt's error.
			panic(pv)
		}
	}()
	err = printableError(doInner(ctx))
	panicking = false
	return false, err
}

// supersededOnReturn decides, as the worker returns, whether its attempt
// was superseded: Heartbeat, Progress or the watch found it so, or the
// worker says so by returning an error wrapping ErrJobNotRunning (then
// checked, so that a wrong claim cannot leave the job running with no
// attempt). An attempt that went a whole heartbeat interval without
// confirming that it owns its job (unconfirmed: cut off from the
// database, its heartbeats and the watch's polls failed) is checked too,
// by endUnconfirmed: the rescuer may have given its job to another
// attempt meanwhile, and River's completer, which checks only that the
// job is running, would write this attempt's outcome onto that one once
// the link returned. A superseded attempt's outcome is tagged in River's
// metadata updates for the pilot, which drops it. Either way it tells the
// pilot that an outcome is on its way (see pilot.beforeReport). workCtx is
// the context River gave the middleware, which holds those updates.
func (jc *jobContext) supersededOnReturn(workCtx context.Context, panicking bool, err error) bool {
	superseded := jc.superseded.Load()
	switch {
	case superseded:
	case !panicking && errors.Is(err, ErrJobNotRunning):
		// When the check fails, trust the worker: writing a superseded
		// attempt's outcome could overwrite a live attempt's.
		superseded = !jc.ownsOnReturn(workCtx, false)
	case !jc.claimed && jc.unconfirmed():
		superseded = !jc.endUnconfirmed(workCtx)
		// endUnconfirmed ended the heartbeat, or could not reach the
		// database for as long as clear would try.
		jc.touched.Store(false)
	}
	if jc.claimed {
		// WorkClaimed records the outcome itself, fenced on the attempt.
		return superseded
	}
	jc.q.pilot.beforeReport(jc.job.ID, jc.job.Attempt, superseded)
	if !superseded {
		return false
	}
	if err := river.MetadataSet(workCtx, metadataSuperseded, jc.job.Attempt); err != nil {
		jc.q.logger.WarnContext(workCtx, "queue: cannot tag a superseded attempt's outcome",
			"job_id", jc.job.ID, "attempt", jc.job.Attempt, "error", err)
	}
	return true
}

// endedSQL ends the heartbeat of an attempt that still runs its job, in
// one statement with the check: it locks the job row (as a heartbeat does,
// so that the rescuer, which locks it first, cannot take the job between
// the check and the write) and records the attempt's end, heartbeat_at
// NULL and updated_at now. From then the rescuer leaves the job to River's
// completer for 5 s (see lastSignSQL). It returns 0 when the job is not
// running as this attempt.
const endedSQL = `
WITH j AS (
	SELECT id, kind, attempt FROM river_job
	WHERE id = $1 AND state = 'running' AND attempt = $2 AND attempted_at IS NOT DISTINCT FROM $3
	FOR SHARE
), up AS (
	INSERT INTO braid_job_progress AS p (job_id, kind, attempt, heartbeat_at, heartbeat_interval, updated_at)
	SELECT id, kind, attempt, NULL, $4::bigint * interval '1 microsecond', now() FROM j
	ON CONFLICT (job_id) DO UPDATE SET
		percent            = CASE WHEN p.attempt = excluded.attempt THEN p.percent END,
		message            = CASE WHEN p.attempt = excluded.attempt THEN p.message END,
		attempt            = excluded.attempt,
		heartbeat_at       = NULL,
		heartbeat_interval = excluded.heartbeat_interval,
		updated_at         = now()
	RETURNING p.job_id
)
SELECT count(*) FROM up`

// endUnconfirmed checks, as an unconfirmed attempt returns, that it still
// owns its job, and ends its heartbeat in the same statement (endedSQL),
// retrying for up to clearTimeout. It reports whether the outcome may go
// to River: true when the attempt owns its job, or finished it itself.
//
// When no statement succeeds in that time the database is out of reach:
// the server may be down, when no other attempt can take the job and
// dropping the outcome would run a completed job again, or this process
// may be cut off while the rescuer works. The outcome then goes to River
// tagged with the attempt (metadataFence), and the pilot writes it, once
// River's completer reaches the database, only if the job still runs as
// this attempt.
func (jc *jobContext) endUnconfirmed(workCtx context.Context) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(workCtx), clearTimeout)
	defer cancel()
	var n int
	err := retry(ctx, func() error {
		return jc.q.pool.QueryRow(ctx, endedSQL, jc.job.ID, jc.job.Attempt, jc.job.AttemptedAt, jc.interval.Microseconds()).Scan(&n)
	})
	if err != nil {
		jc.q.logger.WarnContext(workCtx, "queue: cannot check whether a returning attempt still owns its job; its outcome goes to River fenced on the attempt",
			"job_id", jc.job.ID, "kind", jc.job.Kind, "attempt", jc.job.Attempt, "error", err)
		fence := attemptFence{Attempt: jc.job.Attempt}
		if jc.job.AttemptedAt != nil {
			fence.AttemptedAt = *jc.job.AttemptedAt
		}
		if err := river.MetadataSet(workCtx, metadataFence, fence); err != nil {
			jc.q.logger.WarnContext(workCtx, "queue: cannot fence a returning attempt's outcome",
				"job_id", jc.job.ID, "attempt", jc.job.Attempt, "error", err)
		}
		return true
	}
	if n == 1 {
		return true
	}
	return jc.ownsOnReturn(workCtx, false)
}

// ownsOnReturn reads whether the returning attempt still owns its job (or
// finished it itself), retrying a failed read for up to clearTimeout, and
// reports onError when no read succeeds.
func (jc *jobContext) ownsOnReturn(workCtx context.Context, onError bool) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(workCtx), clearTimeout)
	defer cancel()
	var o ownership
	err := retry(ctx, func() error {
		var err error
		o, err = jc.ownership(ctx)
		return err
	})
	if err != nil {
		jc.q.logger.WarnContext(workCtx, "queue: cannot read whether a returning attempt still owns its job",
			"job_id", jc.job.ID, "kind", jc.job.Kind, "attempt", jc.job.Attempt, "outcome_written", onError, "error", err)
		return onError
	}
	return o != lost
}

// retry calls fn until it succeeds or ctx ends, pausing between calls
// from 10 ms, doubling up to 500 ms. It returns fn's last error when ctx
// ended first.
func retry(ctx context.Context, fn func() error) error {
	pause := 10 * time.Millisecond
	for {
		err := fn()
		if err == nil {
			return nil
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		pause = min(2*pause, 500*time.Millisecond)
	}
}

// PanicError is a panic that a worker, or a middleware inside braid's,
// recovered and returns as its attempt's error, with the stack where it
// was raised. The middleware counts and traces such an attempt as a
// panic (outcome "panicked", error.type "panic"), as one whose panic
// reaches it.
type PanicError struct {
	Value any
	Stack string
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("panic: %v\n%s", e.Value, e.Stack)
}
