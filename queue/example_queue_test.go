package queue_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/riverqueue/river"

	"github.com/braidflow/braid/queue"
)

// GreetArgs are a job's arguments: River's own JobArgs.
type GreetArgs struct {
	Name string `json:"name"`
}

func (GreetArgs) Kind() string { return "greet" }

// GreetWorker is River's own Worker.
type GreetWorker struct {
	river.WorkerDefaults[GreetArgs]
	greetings chan string
}

func (w *GreetWorker) Work(ctx context.Context, job *river.Job[GreetArgs]) error {
	w.greetings <- "hello, " + job.Args.Name
	return nil
}

// The basic use: register River workers, build and start a Queue, insert
// jobs. An idempotency key makes a repeated insert return the first job.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, drop := exampleDB()
	defer drop()

	worker := &GreetWorker{greetings: make(chan string, 1)}
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)

	q, err := queue.New(pool, &queue.Config{
		Workers: workers,
		Logger:  slog.New(slog.DiscardHandler), // keep the output to what the example prints
	})
	if err != nil {
		panic(err)
	}
	if err := q.Start(ctx); err != nil {
		panic(err)
	}
	defer q.Stop(ctx)

	completed, stop := q.River().Subscribe(river.EventKindJobCompleted)
	defer stop()

	opts := &queue.InsertOpts{IdempotencyKey: "greet:braid"}
	first, err := q.Insert(ctx, GreetArgs{Name: "braid"}, opts)
	if err != nil {
		panic(err)
	}
	again, err := q.Insert(ctx, GreetArgs{Name: "braid"}, opts)
	if err != nil {
		panic(err)
	}
	fmt.Println("one job:", again.Job.ID == first.Job.ID, again.UniqueSkippedAsDuplicate)
	fmt.Println("priority:", queue.Priority(first.Job.Priority))

	fmt.Println(<-worker.greetings)
	event := <-completed
	fmt.Println(event.Job.Kind, event.Job.State, "after attempt", event.Job.Attempt)

	stats, err := q.Stats(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("completed jobs:", stats.ByState["completed"])
	// Output:
	// one job: true true
	// priority: normal
	// hello, braid
	// greet completed after attempt 1
	// completed jobs: 1
}
