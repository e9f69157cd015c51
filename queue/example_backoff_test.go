package queue_test

import (
	"context"
	"fmt"
	"time"

	"github.com/riverqueue/river"

	"github.com/braidflow/braid/queue"
)

// The default retry schedule (1 minute × 2^(n−1) after the n-th failed
// attempt, capped at 24 hours, ±20% jitter), and a linear one.
func ExampleBackoff() {
	b := queue.DefaultBackoff
	for _, attempt := range []int{1, 2, 3, 12, 20} {
		lo, hi := b.Bounds(attempt)
		fmt.Printf("after attempt %2d: %-8v (%v to %v)\n", attempt, b.Nominal(attempt), lo, hi)
	}

	linear := queue.Backoff{Strategy: queue.Linear, Base: 10 * time.Second, Max: 30 * time.Second}
	for attempt := 1; attempt <= 4; attempt++ {
		fmt.Print(linear.Delay(attempt), " ")
	}
	fmt.Println()
	// Output:
	// after attempt  1: 1m0s     (48s to 1m12s)
	// after attempt  2: 2m0s     (1m36s to 2m24s)
	// after attempt  3: 4m0s     (3m12s to 4m48s)
	// after attempt 12: 24h0m0s  (19h12m0s to 28h48m0s)
	// after attempt 20: 24h0m0s  (19h12m0s to 28h48m0s)
	// 10s 20s 30s 30s
}

// ReportArgs are the arguments of a job kind with its own retry schedule.
type ReportArgs struct{}

func (ReportArgs) Kind() string { return "report" }

// ReportWorker retries every 30 seconds, ±10%, instead of the Queue's
// Config.RetryPolicy.
type ReportWorker struct {
	river.WorkerDefaults[ReportArgs]
}

var reportBackoff = queue.Backoff{Strategy: queue.Fixed, Base: 30 * time.Second, Jitter: 0.1}

func (w *ReportWorker) NextRetry(job *river.Job[ReportArgs]) time.Time {
	return reportBackoff.NextRetry(job.JobRow)
}

func (w *ReportWorker) Work(ctx context.Context, job *river.Job[ReportArgs]) error { return nil }

// A Backoff as one worker's NextRetry; as Config.RetryPolicy it applies to
// every worker without one.
func ExampleBackoff_NextRetry() {
	lo, hi := reportBackoff.Bounds(7)
	fmt.Println("a failed report retries within", lo, "to", hi)
	// Output:
	// a failed report retries within 27s to 33s
}
