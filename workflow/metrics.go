package workflow

import (
	"go.opentelemetry.io/otel/metric"
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
}

func newEngineMetrics(mp metric.MeterProvider) (*engineMetrics, error) {
	m := mp.Meter("github.com/braidflow/braid/workflow")
	var (
		em  engineMetrics
		err error
	)
	if em.turns, err = m.Int64Counter("braid.turns", metric.WithDescription("Turns of tasks started.")); err != nil {
		return nil, err
	}
	if em.failures, err = m.Int64Counter("braid.turn.failures", metric.WithDescription("Turn attempts that returned an error.")); err != nil {
		return nil, err
	}
	if em.runsStarted, err = m.Int64Counter("braid.runs.started", metric.WithDescription("Runs started.")); err != nil {
		return nil, err
	}
	if em.runsCompleted, err = m.Int64Counter("braid.runs.completed", metric.WithDescription("Runs completed.")); err != nil {
		return nil, err
	}
	if em.runsFailed, err = m.Int64Counter("braid.runs.failed", metric.WithDescription("Runs failed.")); err != nil {
		return nil, err
	}
	if em.reconciled, err = m.Int64Counter("braid.tasks.reconciled", metric.WithDescription("Tasks the reconciler failed because they had no live turn.")); err != nil {
		return nil, err
	}
	if em.nodesSkipped, err = m.Int64Counter("braid.dag.nodes.skipped", metric.WithDescription("DAG nodes skipped: a false condition, skipped dependencies, or a failed DAG.")); err != nil {
		return nil, err
	}
	if em.stepDuration, err = m.Float64Histogram("braid.step.duration", metric.WithUnit("s"), metric.WithDescription("Duration of step bodies.")); err != nil {
		return nil, err
	}
	if em.delayLateness, err = m.Float64Histogram("braid.delay.lateness", metric.WithUnit("s"), metric.WithDescription("How late the delay processor woke a delay, by the database clock.")); err != nil {
		return nil, err
	}
	return &em, nil
}
