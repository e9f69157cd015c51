package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// filterPayload is the name under which an event wait's filter reads the
// event's payload.
const filterPayload = "payload"

// compileFilter compiles the filter of a wait on topic: an expr condition
// over payload, the event's payload, and input, the waiting task's input,
// in the sandbox of a DAG's When conditions (see compileCondition). It must
// be boolean.
func compileFilter(topic, source string) (*condition, error) {
	c, err := compileCondition("", "", source, []string{filterPayload})
	var ce *ConditionError
	if errors.As(err, &ce) {
		ce.DAG, ce.Node, ce.Topic = "", "", topic
		ce.Reason = filterReason(ce.Reason)
		return nil, ce
	}
	if err != nil {
		return nil, err
	}
	if c.used[condStatus] {
		return nil, &ConditionError{Topic: topic, Expr: source, Reason: "unknown name status: a filter reads payload and input"}
	}
	c.topic = topic
	return c, nil
}

// filterReason words a compile error of compileCondition for a filter.
func filterReason(reason string) string {
	const prefix = "a condition reads input, status and the dependencies payload"
	if len(reason) >= len(prefix) && reason[len(reason)-len(prefix):] == prefix {
		return reason[:len(reason)-len(prefix)] + "a filter reads payload and input"
	}
	return reason
}

// filters caches compiled filters by topic and source. It is bounded: when
// full, it starts over.
type filters struct {
	mu sync.Mutex
	m  map[[2]string]*condition
}

const filtersMax = 1024

func (f *filters) get(topic, source string) (*condition, error) {
	k := [2]string{topic, source}
	f.mu.Lock()
	c := f.m[k]
	f.mu.Unlock()
	if c != nil {
		return c, nil
	}
	c, err := compileFilter(topic, source)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	if f.m == nil || len(f.m) >= filtersMax {
		f.m = map[[2]string]*condition{}
	}
	f.m[k] = c
	f.mu.Unlock()
	return c, nil
}

// matches reports whether an event's payload passes a wait's filter (no
// filter passes everything). A filter that fails to evaluate on this
// payload does not match it; the error is logged, naming the task, and
// the wait goes on.
func (e *Engine) matches(ctx context.Context, taskID uuid.UUID, topic, filter string, input, payload []byte) bool {
	if filter == "" {
		return true
	}
	c, err := e.filters.get(topic, filter)
	if err == nil {
		var ok bool
		if ok, err = c.eval(input, map[string]json.RawMessage{filterPayload: payload}, nil); err == nil {
			return ok
		}
	}
	e.logger.WarnContext(ctx, "workflow: an event wait's filter failed on a payload; the event does not match it", "task.id", taskID, "topic", topic, "error", err)
	return false
}

// Publish publishes an event on topic, carrying payload (encoded as JSON,
// at most Config.MaxPayloadBytes). Every task waiting on the topic
// (WaitEvent) whose filter matches the payload gets its next turn in the
// transaction that publishes; it returns how many. Finding them reads the
// waits on this topic only, by an index on the topic.
//
// An event is kept (for Config.Retention), so a wait that a task records
// later sees it too, provided the event was published after the turn that
// suspended on the wait began; see WaitEvent.
func (e *Engine) Publish(ctx context.Context, topic string, payload any) (int, error) {
	var woken int
	var waits []waitSpan
	err := e.withTx(ctx, func(tx pgx.Tx) (err error) {
		woken, waits, err = e.publishTx(ctx, tx, topic, payload)
		return err
	})
	if err != nil {
		return 0, err
	}
	e.recordWaits(waits)
	return woken, nil
}

// PublishTx is Publish inside tx: the event is published, and its waits
// woken, only if tx commits. tx must be READ COMMITTED, PostgreSQL's
// default: one whose snapshot is older than its statements (REPEATABLE
// READ, SERIALIZABLE) would not see a wait recorded since, and is refused.
func (e *Engine) PublishTx(ctx context.Context, tx pgx.Tx, topic string, payload any) (int, error) {
	if err := checkReadCommitted(ctx, tx, "PublishTx"); err != nil {
		return 0, err
	}
	woken, _, err := e.publishTx(ctx, tx, topic, payload)
	return woken, err
}

// topicWaitsSQL lists the waits on topic $1, oldest first, with their
// filters and their tasks' inputs. The partial index
// braid_steps_event_waits serves it: it reads the waits of this topic and
// no other row.
const topicWaitsSQL = `
	SELECT s.task_id, s.name, coalesce(s.wait_filter, ''), s.started_at, t.input
	  FROM braid_steps s JOIN braid_tasks t ON t.id = s.task_id
	 WHERE s.kind = 'event' AND s.status = 'waiting' AND s.wait_on = $1
	 ORDER BY s.created_at`

func (e *Engine) publishTx(ctx context.Context, tx pgx.Tx, topic string, payload any) (woken int, waits []waitSpan, err error) {
	if err := checkMessageName("topic", topic); err != nil {
		return 0, nil, err
	}
	raw, err := e.encode(fmt.Sprintf("payload of an event on topic %q", topic), payload)
	if err != nil {
		return 0, nil, err
	}
	ctx, span := e.tracer.Start(ctx, "braid.publish "+topic, trace.WithAttributes(attribute.String("topic", topic)))
	defer func() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.SetAttributes(attribute.Int("woken", woken))
		span.End()
	}()
	if _, err := tx.Exec(ctx, messageLockSQL, []string{topicLock(topic)}); err != nil {
		return 0, nil, fmt.Errorf("workflow: locking topic %q: %w", topic, err)
	}
	// The event's time is read under the topic's lock, so that it orders
	// events and the waits recorded under the same lock alike.
	tp := traceParent(ctx)
	var publishedAt time.Time
	if err := tx.QueryRow(ctx, `
		INSERT INTO braid_events (topic, payload, trace_parent, published_at)
		VALUES ($1, $2, nullif($3, ''), braid_clock())
		RETURNING published_at`, topic, []byte(raw), tp).Scan(&publishedAt); err != nil {
		return 0, nil, fmt.Errorf("workflow: publishing on topic %q: %w", topic, err)
	}
	rows, err := tx.Query(ctx, topicWaitsSQL, topic)
	if err != nil {
		return 0, nil, fmt.Errorf("workflow: finding the waits on topic %q: %w", topic, err)
	}
	var ds []delivery
	for rows.Next() {
		var (
			d      = delivery{payload: raw, tp: tp, kind: "event"}
			filter string
			since  *time.Time
			input  []byte
		)
		if err := rows.Scan(&d.taskID, &d.step, &filter, &since, &input); err != nil {
			rows.Close()
			return 0, nil, fmt.Errorf("workflow: finding the waits on topic %q: %w", topic, err)
		}
		if since != nil && publishedAt.Before(*since) {
			continue
		}
		if e.matches(ctx, d.taskID, topic, filter, input, raw) {
			ds = append(ds, d)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, nil, fmt.Errorf("workflow: finding the waits on topic %q: %w", topic, err)
	}
	turns, waits, err := e.deliverTx(ctx, tx, ds, false)
	if err != nil {
		return 0, nil, err
	}
	if err := e.wakeTurns(ctx, tx, turns); err != nil {
		return 0, nil, err
	}
	return len(turns), waits, nil
}

// matchPublished finds, for a wait on an event that a batch records, the
// first event on its topic published since the wait's started_at (see
// suspendTasks: since its turn began, and after any event the task's
// earlier waits on the topic took) that matches its filter. The batch has
// recorded the wait, and holds the topic's lock.
func (e *Engine) matchPublished(ctx context.Context, tx pgx.Tx, mw messageWait) (delivery, bool, error) {
	rows, err := tx.Query(ctx, `
		SELECT payload, coalesce(trace_parent, '') FROM braid_events
		 WHERE topic = $1 AND published_at >= (SELECT started_at FROM braid_steps WHERE task_id = $2 AND name = $3)
		 ORDER BY published_at, id`, mw.w.on, mw.o.taskID, mw.w.name)
	if err != nil {
		return delivery{}, false, fmt.Errorf("workflow: reading the events on topic %q: %w", mw.w.on, err)
	}
	defer rows.Close()
	for rows.Next() {
		d := delivery{taskID: mw.o.taskID, step: mw.w.name, kind: "event"}
		if err := rows.Scan(&d.payload, &d.tp); err != nil {
			return delivery{}, false, fmt.Errorf("workflow: reading the events on topic %q: %w", mw.w.on, err)
		}
		if e.matches(ctx, mw.o.taskID, mw.w.on, mw.w.filter, mw.o.t.input, d.payload) {
			return d, true, nil
		}
	}
	return delivery{}, false, rows.Err()
}

// WaitEvent waits for an event published on topic (Publish) whose payload
// passes filter, for at most timeout by the database's clock, or with no
// limit when timeout is 0. It returns the event's payload with ok true, or
// ok false once the timeout passed first; until then it returns
// ErrSuspended, and the task waits at no cost. Exactly one of the two wins
// (invariant 2).
//
// filter is an expr condition over payload (the event's payload, as JSON
// decodes it) and input (the task's input), such as
// `payload.feed_id == input.feed_id`; empty matches every event. It is
// compiled when the wait is first reached, in the sandbox of a DAG's When
// conditions, and must be boolean: one that does not compile is a
// *ConditionError naming the topic and the filter. A filter that fails to
// evaluate on one payload does not match that event.
//
// The wait sees every matching event published after the turn that
// suspends on it began, including those published while that turn still
// ran; events published before it are not seen, nor one that an earlier
// wait of the task on the topic took. A turn that runs again (an attempt
// failed, its process died, it was put back to run later) loses none of
// the events published meanwhile: its wait sees every one published since
// the turn was given (its River job inserted). Each wait takes one event;
// several waits on one topic each take the same event when it matches
// them all. The wait is a durable call recorded under the name
// "event:"+topic (with "#n" when repeated).
func WaitEvent[T any](t *Task, topic, filter string, timeout time.Duration) (payload T, ok bool, err error) {
	if err := checkMessageName("topic", topic); err != nil {
		return payload, false, err
	}
	if filter != "" {
		if _, err := t.eng.filters.get(topic, filter); err != nil {
			return payload, false, err
		}
	}
	return waitMessage[T](t, &pendingWait{kind: "event", on: topic, filter: filter, after: timeout})
}
