package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Metric names. Every instrument comes from the meter
// "github.com/braidflow/braid/queue" of Config.MeterProvider.
const (
	// MetricAttempts counts job attempts started, by job.kind and queue.
	MetricAttempts = "braid.queue.job.attempts"
	// MetricFailures counts attempts that failed (an error, a panic, or a
	// cancel the worker returned with river.JobCancel), by job.kind, queue
	// and error.type ("error", "panic" or "cancel").
	MetricFailures = "braid.queue.job.failures"
	// MetricDuration is a histogram of attempt durations in seconds, by
	// job.kind, queue and outcome ("completed", "failed", "panicked",
	// "snoozed", "cancelled", "superseded" for an attempt that lost its
	// job, or "exited" for one whose worker called runtime.Goexit).
	MetricDuration = "braid.queue.job.duration"
	// MetricDepth is an observable gauge of the jobs in each unfinished state
	// (available, pending, retryable, running, scheduled), by queue and
	// state. It is observed only while the Queue is started.
	MetricDepth = "braid.queue.depth"
	// MetricRescues counts jobs the heartbeat rescuer took back, by job.kind
	// and state (the state the job was moved to).
	MetricRescues = "braid.queue.heartbeat.rescues"
	// MetricAged counts priority raises made by aging, by queue.
	MetricAged = "braid.queue.aging.raises"
)

// depthStates are the unfinished states the depth gauge reports. Finished
// jobs are not depth, and counting them would scan the whole table.
var depthStates = []string{"available", "pending", "retryable", "running", "scheduled"}

// durationBuckets are the bucket boundaries of MetricDuration, from a
// millisecond to ten minutes: the SDK's default boundaries are made for
// milliseconds, and would put every attempt shorter than five seconds in
// one bucket.
var durationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 600}

// depthTimeout bounds the gauge's query, so a slow database never stalls a
// metric collection.
const depthTimeout = 5 * time.Second

type metrics struct {
	attempts metric.Int64Counter
	failures metric.Int64Counter
	duration metric.Float64Histogram
	rescues  metric.Int64Counter
	aged     metric.Int64Counter
	depth    metric.Int64ObservableGauge
	meter    metric.Meter
}

func newMetrics(mp metric.MeterProvider) (*metrics, error) {
	meter := mp.Meter("github.com/braidflow/braid/queue")
	m := &metrics{meter: meter}
	var err error
	wrap := func(name string, err error) error {
		return fmt.Errorf("queue: creating metric %s: %w", name, err)
	}
	if m.attempts, err = meter.Int64Counter(MetricAttempts,
		metric.WithDescription("Job attempts started."),
		metric.WithUnit("{attempt}")); err != nil {
		return nil, wrap(MetricAttempts, err)
	}
	if m.failures, err = meter.Int64Counter(MetricFailures,
		metric.WithDescription("Job attempts that returned an error or panicked."),
		metric.WithUnit("{attempt}")); err != nil {
		return nil, wrap(MetricFailures, err)
	}
	if m.duration, err = meter.Float64Histogram(MetricDuration,
		metric.WithDescription("Duration of job attempts."),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(durationBuckets...)); err != nil {
		return nil, wrap(MetricDuration, err)
	}
	if m.rescues, err = meter.Int64Counter(MetricRescues,
		metric.WithDescription("Running jobs taken back because their heartbeat stopped."),
		metric.WithUnit("{job}")); err != nil {
		return nil, wrap(MetricRescues, err)
	}
	if m.aged, err = meter.Int64Counter(MetricAged,
		metric.WithDescription("Priority raises of waiting jobs made by aging."),
		metric.WithUnit("{raise}")); err != nil {
		return nil, wrap(MetricAged, err)
	}
	if m.depth, err = meter.Int64ObservableGauge(MetricDepth,
		metric.WithDescription("Unfinished jobs by queue and state."),
		metric.WithUnit("{job}")); err != nil {
		return nil, wrap(MetricDepth, err)
	}
	return m, nil
}

// registerDepth starts observing queue depth; the registration is undone by
// Stop.
func (q *Queue) registerDepth() (metric.Registration, error) {
	return q.metrics.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, depthTimeout)
		defer cancel()
		rows, err := q.pool.Query(ctx, `
			SELECT queue, state::text, count(*)
			FROM river_job
			WHERE state = ANY($1::text[]::river_job_state[])
			GROUP BY queue, state`, depthStates)
		if err != nil {
			return fmt.Errorf("queue: observing %s: %w", MetricDepth, err)
		}
		type key struct{ queue, state string }
		counts := make(map[key]int64)
		var k key
		var n int64
		_, err = pgx.ForEachRow(rows, []any{&k.queue, &k.state, &n}, func() error {
			counts[k] = n
			return nil
		})
		if err != nil {
			return fmt.Errorf("queue: observing %s: %w", MetricDepth, err)
		}
		// Report every state of every queue seen, zeros included, so a
		// drained state drops to zero instead of keeping its last value.
		queues := make(map[string]bool)
		for k := range counts {
			queues[k.queue] = true
		}
		for qn := range queues {
			for _, s := range depthStates {
				o.ObserveInt64(q.metrics.depth, counts[key{qn, s}],
					metric.WithAttributes(attribute.String("queue", qn), attribute.String("state", s)))
			}
		}
		return nil
	}, q.metrics.depth)
}
