package workflow_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// slowThenWait records a slow step, then waits for signal "item".
var slowThenWait = workflow.Define("slow_then_wait", func(t *workflow.Task, ms int) (int, error) {
	if _, err := workflow.Step(t, "slow", func(context.Context) (int, error) {
		time.Sleep(time.Duration(ms) * time.Millisecond)
		return 0, nil
	}); err != nil {
		return 0, err
	}
	v, _, err := workflow.WaitSignal[int](t, "item", 0)
	return v, err
})

var plusOne = workflow.Define("plus_one", func(t *workflow.Task, n int) (int, error) { return n + 1, nil })

// A caller's transaction that sent a signal with SignalTx, still open,
// holds its run's mailbox lock. The turns that suspend on a wait on that
// mailbox meanwhile are left out of their batches and recorded once the
// transaction ends; the batches go on without them, so that two such
// transactions, as many as the engine's flushes, stall no other run. Once
// the callers commit, the waits take their signals.
func TestOpenSignalTxHoldsBackOnlyTheWaitsOnItsMailbox(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	eng := startEngine(t, pool, testConfig(slowThenWait, plusOne))
	ctx := ctxTimeout(t, 90*time.Second)
	if r, err := plusOne.Start(ctx, eng, 1, nil); err != nil {
		t.Fatal(err)
	} else if _, err := r.Result(ctx); err != nil {
		t.Fatal(err)
	}
	var txs []pgx.Tx
	var waiting []*workflow.Run[int]
	for i := range 2 {
		run, err := slowThenWait.Start(ctx, eng, 500+300*i, nil)
		if err != nil {
			t.Fatal(err)
		}
		waiting = append(waiting, run)
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		txs = append(txs, tx)
		defer func() { _ = tx.Rollback(context.Background()) }()
		if err := eng.SignalTx(ctx, tx, run.ID, "item", 10+i, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Both turns suspend on their signal while the senders' transactions
	// are open.
	time.Sleep(1500 * time.Millisecond)
	r, err := plusOne.Start(ctx, eng, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 8*time.Second)
	defer cancel()
	if out, err := r.Result(rctx); err != nil || out != 3 {
		t.Fatalf("an unrelated run while two callers' SignalTx transactions are open: %d, %v; want 3, at once", out, err)
	}
	for _, tx := range txs {
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i, run := range waiting {
		if out, err := run.Result(ctx); err != nil || out != 10+i {
			t.Errorf("the run waiting on the mailbox of open transaction %d: %d, %v; want %d", i, out, err, 10+i)
		}
	}
}

var waitOnTopic = workflow.Define("wait_on_topic", func(t *workflow.Task, n int) (int, error) {
	v, _, err := workflow.WaitEvent[int](t, "open.topic", "", 0)
	return v + n, err
})

// One caller's PublishTx still open on a topic that more tasks wait on
// than the pool has connections: the outcomes left out of their batches
// wait for the topic's lock holding no connection, so an unrelated run
// starts and completes at once; once the caller commits, every wait is
// recorded, and sees the next event.
func TestOpenPublishTxOnATopicManyWaitOnHoldsNoConnection(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	// The runs are started before the engine works them, so that their
	// turns all suspend while the caller's transaction is open.
	eng := newEngine(t, pool, testConfig(waitOnTopic, plusOne))
	ctx := ctxTimeout(t, 120*time.Second)
	var runs []*workflow.Run[int]
	for i := range 2 * testutil.PoolMaxConnsDefault {
		r, err := waitOnTopic.Start(ctx, eng, i, nil)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := eng.PublishTx(ctx, tx, "open.topic", 100); err != nil {
		t.Fatal(err)
	}
	if err := eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	rctx, cancel := context.WithTimeout(ctx, 8*time.Second)
	defer cancel()
	var out int
	r, err := plusOne.Start(rctx, eng, 2, nil)
	if err == nil {
		out, err = r.Result(rctx)
	}
	if cerr := tx.Commit(ctx); cerr != nil {
		t.Fatal(cerr)
	}
	if err != nil || out != 3 {
		t.Fatalf("an unrelated run while one PublishTx is open on a topic that %d tasks wait on: %d, %v; want 3, at once", len(runs), out, err)
	}
	// The caller's event was published before the turns that wait began,
	// so they do not see it: the waits were recorded, and see the next.
	waitFor(t, "every wait to be recorded", 30*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM braid_steps WHERE kind = 'event' AND status = 'waiting'`) == len(runs)
	})
	if _, err := eng.Publish(ctx, "open.topic", 100); err != nil {
		t.Fatal(err)
	}
	for i, r := range runs {
		if out, err := r.Result(ctx); err != nil || out != 100+i {
			t.Errorf("the run waiting on the topic, once the publish committed: %d, %v; want %d", out, err, 100+i)
		}
	}
}

// One run's turn suspends while a caller's SignalTx holds its mailbox's
// lock for two seconds, and its outcome is tried again and again meanwhile:
// a try that records nothing is no batch, and the metrics count only the
// batches that recorded outcomes, two for a run of two turns, each of one.
func TestOutcomesLeftOutAreNotCountedAsBatches(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	cfg := testConfig(signalCollector)
	cfg.MeterProvider = mp
	ctx := ctxTimeout(t, 60*time.Second)
	eng := newEngine(t, pool, cfg)
	run, err := signalCollector.Start(ctx, eng, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if err := eng.SignalTx(ctx, tx, run.ID, "item", 7, nil); err != nil {
		t.Fatal(err)
	}
	if err := eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if out, err := run.Result(ctx); err != nil || len(out) != 1 || out[0] != 7 {
		t.Fatalf("the run: %v, %v; want [7]", out, err)
	}
	if err := eng.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	m := collectEngineMetrics(t, reader)
	if c := m.sizes[workflow.MetricBatchSize+"{committed}"]; c.Count != 2 || c.Sum != 2 {
		t.Errorf("%s{committed}: %d batches holding %d outcomes for a run of two turns; want 2 of 1", workflow.MetricBatchSize, c.Count, c.Sum)
	}
}

// SignalTx and PublishTx refuse a caller's transaction whose snapshot is
// older than its statements (REPEATABLE READ, SERIALIZABLE): a wait that
// committed after the snapshot was taken, while the send waited for the
// mailbox's or topic's lock, is not seen by it, and the message would stay
// in the mailbox, or among the topic's past events, while the wait waits
// on. The error names the isolation; nothing is sent, and a send in a
// READ COMMITTED transaction then wakes each wait.
func TestSignalTxAndPublishTxRefuseASnapshotOlderThanTheWaits(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	eng := newEngine(t, pool, testConfig(signalCollector, eventWaiter))
	ctx := ctxTimeout(t, 60*time.Second)
	sig, err := signalCollector.Start(ctx, eng, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := eventWaiter.Start(ctx, eng, eventWaitIn{Topic: "iso.topic"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The callers' snapshots are taken before the waits are recorded.
	repeatable, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = repeatable.Rollback(context.Background()) }()
	serializable, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = serializable.Rollback(context.Background()) }()
	for _, tx := range []pgx.Tx{repeatable, serializable} {
		if _, err := tx.Exec(ctx, `SELECT 1`); err != nil {
			t.Fatal(err)
		}
	}
	if err := eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both waits", 30*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM braid_steps WHERE kind IN ('signal', 'event') AND status = 'waiting'`) == 2
	})

	if err := eng.SignalTx(ctx, repeatable, sig.ID, "item", 5, nil); err == nil {
		if err := repeatable.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if count(t, pool, `SELECT count(*) FROM braid_signals WHERE delivered_at IS NULL`) == 1 &&
			count(t, pool, `SELECT count(*) FROM braid_steps WHERE kind = 'signal' AND status = 'waiting'`) == 1 {
			t.Errorf("SignalTx in a REPEATABLE READ transaction left its signal in the mailbox while the run's wait on it waits")
		}
	} else if !strings.Contains(err.Error(), "repeatable read") || !strings.Contains(err.Error(), "READ COMMITTED") {
		t.Errorf("SignalTx in a REPEATABLE READ transaction: %v; want an error naming its isolation and the one it needs", err)
	}
	if _, err := eng.PublishTx(ctx, serializable, "iso.topic", eventPayload{N: 6}); err == nil {
		if err := serializable.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if count(t, pool, `SELECT count(*) FROM braid_events WHERE topic = 'iso.topic'`) == 1 &&
			count(t, pool, `SELECT count(*) FROM braid_steps WHERE kind = 'event' AND status = 'waiting'`) == 1 {
			t.Errorf("PublishTx in a SERIALIZABLE transaction published an event that the wait on its topic, recorded before the publish, never sees")
		}
	} else if !strings.Contains(err.Error(), "serializable") || !strings.Contains(err.Error(), "READ COMMITTED") {
		t.Errorf("PublishTx in a SERIALIZABLE transaction: %v; want an error naming its isolation and the one it needs", err)
	}

	if err := eng.Signal(ctx, sig.ID, "item", 7, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Publish(ctx, "iso.topic", eventPayload{N: 8}); err != nil {
		t.Fatal(err)
	}
	if got, err := sig.Result(ctx); err != nil || len(got) != 1 {
		t.Errorf("the run waiting on a signal: %v, %v; want it completed", got, err)
	}
	if got, err := ev.Result(ctx); err != nil || got <= 0 {
		t.Errorf("the run waiting on an event: %d, %v; want it completed", got, err)
	}
}
