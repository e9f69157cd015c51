package workflow

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Metric names. Every instrument comes from the meter
// "github.com/braidflow/braid/workflow" of Config.MeterProvider. The
// queue's own metrics (attempts, durations, depth) are listed in package
// queue.
const (
	// MetricTurns counts the turns of tasks that started their workflow's
	// code.
	MetricTurns = "braid.turns"
	// MetricTurnFailures counts the turns whose code returned an error or
	// panicked.
	MetricTurnFailures = "braid.turn.failures"
	// MetricRunsStarted counts runs started (an idempotency key that finds
	// its run starts none).
	MetricRunsStarted = "braid.runs.started"
	// MetricRunsCompleted and MetricRunsFailed count the runs that
	// finished, by how.
	MetricRunsCompleted = "braid.runs.completed"
	MetricRunsFailed    = "braid.runs.failed"
	// MetricReconciled counts the tasks the reconciler failed because no
	// turn of theirs was left to run them.
	MetricReconciled = "braid.tasks.reconciled"
	// MetricNodesSkipped counts the DAG nodes skipped.
	MetricNodesSkipped = "braid.dag.nodes.skipped"
	// MetricStepDuration is a histogram of the durations of step bodies,
	// in seconds.
	MetricStepDuration = "braid.step.duration"
	// MetricDelayLateness is a histogram of how late the delay processor
	// woke delays, in seconds, by the database clock.
	MetricDelayLateness = "braid.delay.lateness"
	// MetricBatchSize is a histogram of the turn outcomes that each batch
	// transaction carried, by result: "committed", or "failed" (its
	// outcomes are then recorded again one at a time, each in a batch of
	// its own). Config.OutcomeBatchSize bounds it; batches far smaller
	// than the turns that end together show a linger too short for them.
	MetricBatchSize = "braid.batch.size"
	// MetricBatchDuration is a histogram of the durations of batch
	// transactions, from their first statement to their commit (or
	// failure), in seconds, by result. A turn's outcome waits for this,
	// plus up to Config.OutcomeLinger.
	MetricBatchDuration = "braid.batch.duration"
)

// secondsBuckets are the bucket boundaries of braid's histograms of
// seconds, from a millisecond to a minute: the SDK's default boundaries
// are made for milliseconds, and would put every duration below five
// seconds in one bucket.
var secondsBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// sizeBuckets are the bucket boundaries of MetricBatchSize.
var sizeBuckets = []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000}

// The values of the result attribute of the batch histograms.
var (
	batchCommitted = metric.WithAttributes(attribute.String("result", "committed"))
	batchFailed    = metric.WithAttributes(attribute.String("result", "failed"))
)

type engineMetrics struct {
	turns         metric.Int64Counter
	failures      metric.Int64Counter
	runsStarted   metric.Int64Counter
	runsCompleted metric.Int64Counter
	runsFailed    metric.Int64Counter
	reconciled    metric.Int64Counter
	nodesSkipped  metric.Int64Counter
	stepDuration  metric.Float64Histogram
	delayLateness metric.Float64Histogram
	batchSize     metric.Int64Histogram
	batchDuration metric.Float64Histogram
}

// txCounts counts what a transaction does that the metrics count (the
// runs it starts and finishes, the DAG nodes it skips), for them to count
// once it has committed: a batch that fails, and is recorded again one
// outcome at a time, counts them only once, and one that never commits
// counts none.
type txCounts struct{ completed, failed, started, skipped int64 }

// add counts a run that finishes with status.
func (f *txCounts) add(status string) {
	if status == "completed" {
		f.completed++
	} else {
		f.failed++
	}
}

// record adds the counts to the metrics. Call it once their transaction
// has committed.
func (f txCounts) record(ctx context.Context, m *engineMetrics) {
	if f.completed > 0 {
		m.runsCompleted.Add(ctx, f.completed)
	}
	if f.failed > 0 {
		m.runsFailed.Add(ctx, f.failed)
	}
	if f.started > 0 {
		m.runsStarted.Add(ctx, f.started)
	}
	if f.skipped > 0 {
		m.nodesSkipped.Add(ctx, f.skipped)
	}
}

func newEngineMetrics(mp metric.MeterProvider) (*engineMetrics, error) {
	m := mp.Meter("github.com/braidflow/braid/workflow")
	var em engineMetrics
	counters := []struct {
		c          *metric.Int64Counter
		name, desc string
		unit       string
	}{
		{&em.turns, MetricTurns, "Turns of tasks started.", "{turn}"},
		{&em.failures, MetricTurnFailures, "Turn attempts that returned an error.", "{turn}"},
		{&em.runsStarted, MetricRunsStarted, "Runs started.", "{run}"},
		{&em.runsCompleted, MetricRunsCompleted, "Runs completed.", "{run}"},
		{&em.runsFailed, MetricRunsFailed, "Runs failed.", "{run}"},
		{&em.reconciled, MetricReconciled, "Tasks the reconciler failed because they had no live turn.", "{task}"},
		{&em.nodesSkipped, MetricNodesSkipped, "DAG nodes skipped: a false condition, skipped dependencies, or a failed DAG.", "{node}"},
	}
	for _, c := range counters {
		var err error
		if *c.c, err = m.Int64Counter(c.name, metric.WithDescription(c.desc), metric.WithUnit(c.unit)); err != nil {
			return nil, fmt.Errorf("workflow: creating metric %s: %w", c.name, err)
		}
	}
	seconds := []struct {
		h          *metric.Float64Histogram
		name, desc string
	}{
		{&em.stepDuration, MetricStepDuration, "Duration of step bodies."},
		{&em.delayLateness, MetricDelayLateness, "How late the delay processor woke a delay, by the database clock."},
		{&em.batchDuration, MetricBatchDuration, "Duration of the transactions that record batches of turn outcomes, by result."},
	}
	for _, h := range seconds {
		var err error
		if *h.h, err = m.Float64Histogram(h.name, metric.WithDescription(h.desc), metric.WithUnit("s"),
			metric.WithExplicitBucketBoundaries(secondsBuckets...)); err != nil {
			return nil, fmt.Errorf("workflow: creating metric %s: %w", h.name, err)
		}
	}
	var err error
	if em.batchSize, err = m.Int64Histogram(MetricBatchSize,
		metric.WithDescription("Turn outcomes per batch transaction, by result."), metric.WithUnit("{outcome}"),
		metric.WithExplicitBucketBoundaries(sizeBuckets...)); err != nil {
		return nil, fmt.Errorf("workflow: creating metric %s: %w", MetricBatchSize, err)
	}
	return &em, nil
}

// recordBatch records a batch transaction of n outcomes that took d and
// ended with err.
func (em *engineMetrics) recordBatch(ctx context.Context, n int, d time.Duration, err error) {
	result := batchCommitted
	if err != nil {
		result = batchFailed
	}
	em.batchSize.Record(ctx, int64(n), result)
	em.batchDuration.Record(ctx, d.Seconds(), result)
}
