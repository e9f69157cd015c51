package queue

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/braidflow/braid/internal/testdb"
)

type emailArgs struct {
	To string `json:"to"`
}

func (emailArgs) Kind() string { return "email" }

type smsArgs struct{}

func (smsArgs) Kind() string { return "sms" }

type urgentArgs struct{}

func (urgentArgs) Kind() string { return "urgent" }

func (urgentArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{Priority: int(PriorityHigh)} }

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.DB(t)
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[emailArgs]) error { return nil }))
	river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[smsArgs]) error { return nil }))
	q := startQueue(t, pool, &Config{Workers: workers})
	key := func(k string) *InsertOpts { return &InsertOpts{IdempotencyKey: k} }

	first, err := q.Insert(ctx, emailArgs{To: "a@example.com"}, key("welcome:a"))
	if err != nil {
		t.Fatal(err)
	}
	if first.UniqueSkippedAsDuplicate {
		t.Fatal("the first insert reports a duplicate")
	}
	// Different args, same key: the key decides, not the args.
	second, err := q.Insert(ctx, emailArgs{To: "b@example.com"}, key("welcome:a"))
	if err != nil {
		t.Fatal(err)
	}
	if second.Job.ID != first.Job.ID || !second.UniqueSkippedAsDuplicate {
		t.Errorf("second insert with the key = job %d (duplicate %v), want job %d as a duplicate",
			second.Job.ID, second.UniqueSkippedAsDuplicate, first.Job.ID)
	}

	// Concurrent inserts with a new key all get one job.
	var wg sync.WaitGroup
	ids := make([]int64, 8)
	errs := make([]error, 8)
	for i := range ids {
		wg.Go(func() {
			res, err := q.Insert(ctx, emailArgs{}, key("race"))
			errs[i] = err
			if err == nil {
				ids[i] = res.Job.ID
			}
		})
	}
	wg.Wait()
	for i := range ids {
		if errs[i] != nil || ids[i] != ids[0] {
			t.Fatalf("concurrent inserts with one key: ids %v, errors %v; want one job", ids, errs)
		}
	}

	// The key still holds once the job completed.
	waitState(t, q, first.Job.ID, rivertype.JobStateCompleted)
	again, err := q.Insert(ctx, emailArgs{}, key("welcome:a"))
	if err != nil || again.Job.ID != first.Job.ID {
		t.Errorf("insert after completion = %v, %v; want job %d", again, err, first.Job.ID)
	}

	// Keys are scoped to the kind; other keys insert other jobs.
	sms, err := q.Insert(ctx, smsArgs{}, key("welcome:a"))
	if err != nil || sms.Job.ID == first.Job.ID || sms.UniqueSkippedAsDuplicate {
		t.Errorf("same key, other kind = %+v, %v; want a new job", sms, err)
	}
	other, err := q.Insert(ctx, emailArgs{}, key("welcome:b"))
	if err != nil || other.Job.ID == first.Job.ID {
		t.Errorf("other key = %+v, %v; want a new job", other, err)
	}

	// Through River directly, with the key in the metadata.
	direct, err := q.River().Insert(ctx, emailArgs{}, &river.InsertOpts{Metadata: []byte(`{"braid_idempotency_key": "welcome:a"}`)})
	if err != nil || direct.Job.ID != first.Job.ID {
		t.Errorf("River insert with the metadata key = %+v, %v; want job %d", direct, err, first.Job.ID)
	}

	// A rolled-back insert leaves the key free.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rolled, err := q.InsertTx(ctx, tx, emailArgs{}, key("rolled-back"))
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	fresh, err := q.Insert(ctx, emailArgs{}, key("rolled-back"))
	if err != nil || fresh.UniqueSkippedAsDuplicate || fresh.Job.ID == rolled.Job.ID {
		t.Errorf("insert after a rollback = %+v, %v; want a new job", fresh, err)
	}

	// Batches: a repeated key in one batch is an error; a key already
	// present returns the existing job in place.
	if _, err := q.InsertMany(ctx, []InsertManyParams{
		{Args: emailArgs{}, InsertOpts: key("batch")},
		{Args: emailArgs{}, InsertOpts: key("batch")},
	}); err == nil || !strings.Contains(err.Error(), `"batch" appears twice`) {
		t.Errorf("a key twice in one batch = %v, want an error naming it", err)
	}
	many, err := q.InsertMany(ctx, []InsertManyParams{
		{Args: emailArgs{}, InsertOpts: key("welcome:a")},
		{Args: emailArgs{}, InsertOpts: key("batch")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if many[0].Job.ID != first.Job.ID || !many[0].UniqueSkippedAsDuplicate || many[1].UniqueSkippedAsDuplicate {
		t.Errorf("batch results = %+v, %+v; want the existing job, then a new one", many[0], many[1])
	}
}

func TestIdempotencyKeyInputs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := newQueue(t, testdb.DB(t), nil)
	for _, tc := range []struct {
		opts *InsertOpts
		want string
	}{
		{&InsertOpts{IdempotencyKey: strings.Repeat("k", IdempotencyKeyMaxLength+1)}, "the limit is 500"},
		{&InsertOpts{IdempotencyKey: "a\x00b"}, "NUL"},
		{&InsertOpts{IdempotencyKey: "k", InsertOpts: river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}}, "both an IdempotencyKey and UniqueOpts"},
		{&InsertOpts{IdempotencyKey: "k", InsertOpts: river.InsertOpts{Metadata: []byte(`[1]`)}}, "not a JSON object"},
		{&InsertOpts{InsertOpts: river.InsertOpts{Priority: 9}}, "priority 9 is out of range"},
	} {
		if _, err := q.Insert(ctx, emailArgs{}, tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Insert(%+v) = %v, want an error containing %q", tc.opts, err, tc.want)
		}
	}
	if _, err := q.River().Insert(ctx, emailArgs{}, &river.InsertOpts{Metadata: []byte(`{"braid_idempotency_key": 7}`)}); err == nil ||
		!strings.Contains(err.Error(), "must be a string") {
		t.Errorf("a non-string metadata key = %v, want an error", err)
	}
	// Other metadata survives next to the key.
	res, err := q.Insert(ctx, emailArgs{}, &InsertOpts{IdempotencyKey: "k", InsertOpts: river.InsertOpts{Metadata: []byte(`{"tenant": "acme"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	if md := string(res.Job.Metadata); !strings.Contains(md, `"tenant": "acme"`) || !strings.Contains(md, `"braid_idempotency_key": "k"`) {
		t.Errorf("metadata = %s, want the caller's and the key", md)
	}
}

func TestInsertPriorities(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := newQueue(t, testdb.DB(t), nil)
	check := func(what string, res *rivertype.JobInsertResult, err error, want Priority) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := Priority(res.Job.Priority); got != want {
			t.Errorf("%s: priority %s, want %s", what, got, want)
		}
	}
	res, err := q.Insert(ctx, emailArgs{}, nil)
	check("braid insert, nothing set", res, err, PriorityNormal)
	res, err = q.Insert(ctx, emailArgs{}, &InsertOpts{InsertOpts: river.InsertOpts{Priority: int(PriorityLow)}})
	check("braid insert, low", res, err, PriorityLow)
	res, err = q.Insert(ctx, urgentArgs{}, nil)
	check("braid insert, args declare high", res, err, PriorityHigh)
	res, err = q.Insert(ctx, urgentArgs{}, &InsertOpts{InsertOpts: river.InsertOpts{Priority: int(PriorityCritical)}})
	check("braid insert, call overrides args", res, err, PriorityCritical)
	res, err = q.River().Insert(ctx, emailArgs{}, nil)
	check("River insert, nothing set (River's default)", res, err, PriorityCritical)

	tx, err := q.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	many, err := q.InsertManyTx(ctx, tx, []InsertManyParams{{Args: emailArgs{}}, {Args: urgentArgs{}}})
	if err != nil {
		t.Fatal(err)
	}
	check("batch, nothing set", many[0], nil, PriorityNormal)
	check("batch, args declare high", many[1], nil, PriorityHigh)
	if _, err := q.InsertMany(ctx, nil); err == nil {
		t.Error("InsertMany of nothing succeeded")
	}
	if _, err := q.Insert(ctx, nil, nil); err == nil {
		t.Error("Insert of nil args succeeded")
	}
}

func TestParsePriority(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Priority{
		"critical": PriorityCritical, "HIGH": PriorityHigh, " normal ": PriorityNormal, "low": PriorityLow,
		"1": PriorityCritical, "4": PriorityLow,
	} {
		got, err := ParsePriority(in)
		if err != nil || got != want {
			t.Errorf("ParsePriority(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "urgent", "0", "5"} {
		if _, err := ParsePriority(in); err == nil || !strings.Contains(err.Error(), "critical, high, normal, low or 1 to 4") {
			t.Errorf("ParsePriority(%q) = %v, want an error listing the levels", in, err)
		}
	}
	if got := PriorityLow.String() + "," + Priority(9).String(); got != "low,Priority(9)" {
		t.Errorf("names = %s", got)
	}
}
