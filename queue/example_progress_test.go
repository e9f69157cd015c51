package queue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/riverqueue/river"

	"github.com/braidflow/braid/queue"
)

// ExportArgs are the arguments of a long job that reports progress.
type ExportArgs struct {
	Rows int `json:"rows"`
}

func (ExportArgs) Kind() string { return "export" }

type ExportWorker struct {
	river.WorkerDefaults[ExportArgs]
}

func (w *ExportWorker) Work(ctx context.Context, job *river.Job[ExportArgs]) error {
	for done := 0; done < job.Args.Rows; done += 500 {
		// … export rows done to done+500 …
		msg := fmt.Sprintf("%d of %d rows", done+500, job.Args.Rows)
		if err := queue.Progress(ctx, (done+500)*100/job.Args.Rows, msg); err != nil {
			return err
		}
	}
	return nil
}

// Live progress: the worker reports with queue.Progress, and any process
// listening on queue.ProgressChannel sees each report as it is written.
func ExampleProgress() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, drop := exampleDB()
	defer drop()

	// A listener, as a dashboard in another process would run it.
	conn, err := pool.Acquire(ctx)
	if err != nil {
		panic(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN "+queue.ProgressChannel); err != nil {
		panic(err)
	}

	workers := river.NewWorkers()
	river.AddWorker(workers, &ExportWorker{})
	q, err := queue.New(pool, &queue.Config{Workers: workers, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	if err := q.Start(ctx); err != nil {
		panic(err)
	}
	defer q.Stop(ctx)

	if _, err := q.Insert(ctx, ExportArgs{Rows: 2000}, nil); err != nil {
		panic(err)
	}
	for range 4 {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			panic(err)
		}
		var p queue.JobProgress
		if err := json.Unmarshal([]byte(n.Payload), &p); err != nil {
			panic(err)
		}
		fmt.Printf("%s job, attempt %d: %3d%% %s\n", p.Kind, p.Attempt, p.Percent, p.Message)
	}
	// Output:
	// export job, attempt 1:  25% 500 of 2000 rows
	// export job, attempt 1:  50% 1000 of 2000 rows
	// export job, attempt 1:  75% 1500 of 2000 rows
	// export job, attempt 1: 100% 2000 of 2000 rows
}
