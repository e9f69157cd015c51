package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/braidflow/braid/internal/testdb"
	"github.com/braidflow/braid/queue"
)

func TestNewConfig(t *testing.T) {
	t.Parallel()
	pool := testdb.DB(t)

	if _, err := New(nil, nil); err == nil {
		t.Error("New(nil, nil) succeeded")
	}
	bad := []struct {
		cfg  Config
		want string
	}{
		{Config{PollInterval: -time.Second}, "Config.PollInterval is -1s"},
		{Config{PollInterval: time.Microsecond}, "Config.PollInterval is 1µs; it must be at least 1ms"},
		{Config{MissedSlotGrace: -1}, "Config.MissedSlotGrace is -1ns"},
		{Config{RecurringStaleAfter: -time.Minute}, "Config.RecurringStaleAfter is -1m0s"},
		{Config{RecurringBatchSize: -1}, "Config.RecurringBatchSize is -1"},
	}
	for _, tt := range bad {
		if _, err := New(pool, &tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%+v) error = %v, want it to contain %q", tt.cfg, err, tt.want)
		}
	}

	s := newScheduler(t, pool, nil)
	if s.cfg.PollInterval != PollIntervalDefault || s.cfg.MissedSlotGrace != MissedSlotGraceDefault ||
		s.cfg.RecurringStaleAfter != RecurringStaleAfterDefault || s.cfg.RecurringBatchSize != RecurringBatchSizeDefault ||
		s.cfg.LeaseName != LeaseNameDefault || s.cfg.Leases == nil {
		t.Errorf("defaults not applied: %+v", s.cfg)
	}
	if err := s.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "Config.Queue") {
		t.Errorf("Start without River: error = %v", err)
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Errorf("Stop of a scheduler never started: %v", err)
	}

	s = newScheduler(t, pool, &Config{Queue: insertOnlyQueue(t, pool)})
	if err := s.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if err := s.Start(context.Background()); err == nil {
		t.Error("second Start succeeded")
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatalf("Start after Stop: %v", err)
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
}

func TestScheduleCRUD(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.DB(t)
	s := newScheduler(t, pool, nil)

	before := queryValue[time.Time](t, pool, "SELECT now()")
	sch, err := s.Create(ctx, &ScheduleParams{
		TargetType:  TargetJob,
		Name:        "nightly",
		Description: "nightly report",
		Expression:  "@every 90m",
		Target:      "report",
		Args:        map[string]int{"days": 1},
		CreatedBy:   "ops",
	})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	want := &Schedule{
		ID: sch.ID, Name: "nightly", Description: "nightly report", Expression: "@every 1h30m", TimeZone: "UTC",
		TargetType: TargetJob, Target: "report", Args: json.RawMessage(`{"days": 1}`), Queue: QueueDefault,
		Priority: PriorityDefault, Enabled: true, OverlapPolicy: OverlapSkip, CatchUpPolicy: CatchUpOnce,
		NextRunAt: sch.NextRunAt, CreatedBy: "ops", CreatedAt: sch.CreatedAt, UpdatedAt: sch.UpdatedAt,
	}
	if diff := cmp.Diff(want, sch); diff != "" {
		t.Errorf("Create (-want +got):\n%s", diff)
	}
	// @every counts from the creation time truncated to the second.
	if wantNext := before.Truncate(time.Second).Add(90 * time.Minute); sch.NextRunAt.Before(wantNext) || sch.NextRunAt.After(wantNext.Add(2*time.Second)) || sch.NextRunAt.Nanosecond() != 0 {
		t.Errorf("NextRunAt = %s, want about %s on a whole second", sch.NextRunAt, wantNext)
	}

	if _, err := s.Create(ctx, &ScheduleParams{TargetType: TargetJob, Name: "nightly", Expression: "@daily", Target: "x"}); !errors.Is(err, ErrScheduleExists) {
		t.Errorf("duplicate Create error = %v, want ErrScheduleExists", err)
	}

	got, err := s.Get(ctx, "nightly")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if diff := cmp.Diff(sch, got); diff != "" {
		t.Errorf("Get (-created +got):\n%s", diff)
	}
	if _, err := s.Get(ctx, "nope"); !errors.Is(err, ErrScheduleNotFound) {
		t.Errorf("Get(nope) error = %v, want ErrScheduleNotFound", err)
	}

	if _, err := s.Create(ctx, &ScheduleParams{
		Name: "berlin", Expression: "0 9 * * MON-FRI", TimeZone: "Europe/Berlin", TargetType: TargetWorkflow,
		Target: "digest", Args: json.RawMessage(`[1,2]`), Disabled: true, Priority: 4, Queue: "low_prio",
		OverlapPolicy: OverlapAllow, CatchUpPolicy: CatchUpSkip, MaxAttempts: 3,
	}); err != nil {
		t.Fatalf("Create berlin: %v", err)
	}
	names := func(list []*Schedule) []string {
		var out []string
		for _, s := range list {
			out = append(out, s.Name)
		}
		return out
	}
	all, err := s.List(ctx, nil)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if diff := cmp.Diff([]string{"berlin", "nightly"}, names(all)); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	if all[0].MaxAttempts != 3 || all[0].Priority != 4 || all[0].Queue != "low_prio" || all[0].Enabled {
		t.Errorf("berlin stored as %+v", all[0])
	}
	enabled := true
	if list, _ := s.List(ctx, &ScheduleListParams{Enabled: &enabled}); !cmp.Equal([]string{"nightly"}, names(list)) {
		t.Errorf("List(enabled) = %v", names(list))
	}
	if list, _ := s.List(ctx, &ScheduleListParams{Limit: 1, Offset: 1}); !cmp.Equal([]string{"nightly"}, names(list)) {
		t.Errorf("List(limit 1, offset 1) = %v", names(list))
	}
	if _, err := s.List(ctx, &ScheduleListParams{Limit: -1}); err == nil {
		t.Error("List with a negative limit succeeded")
	}

	// Changing the description keeps next_run_at; changing the expression
	// moves it.
	desc := "changed"
	upd, err := s.Update(ctx, "nightly", &ScheduleUpdate{Description: &desc})
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	if upd.Description != "changed" || !upd.NextRunAt.Equal(sch.NextRunAt) {
		t.Errorf("Update description: got %q next %s, want %q next %s", upd.Description, upd.NextRunAt, desc, sch.NextRunAt)
	}
	expr := "0 0 1 1 *"
	upd, err = s.Update(ctx, "nightly", &ScheduleUpdate{Expression: &expr})
	if err != nil {
		t.Fatalf("Update expression: %v", err)
	}
	if wantNext := MustParse(expr, "").Next(before); !upd.NextRunAt.Equal(wantNext) {
		t.Errorf("NextRunAt after expression change = %s, want %s", upd.NextRunAt, wantNext)
	}
	bad := "61 * * * *"
	if _, err := s.Update(ctx, "nightly", &ScheduleUpdate{Expression: &bad}); !errors.Is(err, ErrInvalidExpression) {
		t.Errorf("Update with a bad expression: error = %v, want ErrInvalidExpression", err)
	}
	if _, err := s.Update(ctx, "nope", &ScheduleUpdate{Description: &desc}); !errors.Is(err, ErrScheduleNotFound) {
		t.Errorf("Update(nope) error = %v, want ErrScheduleNotFound", err)
	}

	// Enabling again resumes at the first slot after now on the same grid.
	if _, err := s.Create(ctx, &ScheduleParams{TargetType: TargetJob, Name: "tick", Expression: "@every 10s", Target: "x"}); err != nil {
		t.Fatal(err)
	}
	if off, err := s.Toggle(ctx, "tick", false); err != nil || off.Enabled {
		t.Fatalf("Toggle off: %v, %+v", err, off)
	}
	exec(t, pool, `UPDATE braid_schedules SET next_run_at = date_trunc('second', now()) - interval '95 seconds' WHERE name = 'tick'`)
	old := queryValue[time.Time](t, pool, `SELECT next_run_at FROM braid_schedules WHERE name = 'tick'`)
	on, err := s.Toggle(ctx, "tick", true)
	if err != nil || !on.Enabled {
		t.Fatalf("Toggle on: %v, %+v", err, on)
	}
	now := queryValue[time.Time](t, pool, "SELECT now()")
	if !on.NextRunAt.After(now.Add(-time.Second)) || on.NextRunAt.After(now.Add(11*time.Second)) || on.NextRunAt.Sub(old)%(10*time.Second) != 0 {
		t.Errorf("NextRunAt after enabling = %s; want the first 10s step of %s after %s", on.NextRunAt, old, now)
	}

	if err := s.Delete(ctx, "tick"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if err := s.Delete(ctx, "tick"); !errors.Is(err, ErrScheduleNotFound) {
		t.Errorf("second Delete error = %v, want ErrScheduleNotFound", err)
	}

	// The Tx twins write nothing when the transaction rolls back.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateTx(ctx, tx, &ScheduleParams{TargetType: TargetJob, Name: "ghost", Expression: "@hourly", Target: "x"}); err != nil {
		t.Fatalf("CreateTx: %v", err)
	}
	if _, err := s.ToggleTx(ctx, tx, "nightly", false); err != nil {
		t.Fatalf("ToggleTx: %v", err)
	}
	if err := s.DeleteTx(ctx, tx, "berlin"); err != nil {
		t.Fatalf("DeleteTx: %v", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	all, _ = s.List(ctx, nil)
	if diff := cmp.Diff([]string{"berlin", "nightly"}, names(all)); diff != "" || !all[1].Enabled {
		t.Errorf("after rollback (-want +got):\n%s enabled=%v", diff, all[1].Enabled)
	}
}

func TestScheduleValidation(t *testing.T) {
	t.Parallel()
	pool := testdb.DB(t)
	s := newScheduler(t, pool, nil)

	valid := func() ScheduleParams {
		return ScheduleParams{TargetType: TargetJob, Name: "n", Expression: "@daily", Target: "kind"}
	}
	tests := []struct {
		name   string
		change func(p *ScheduleParams)
		want   string
	}{
		{"empty name", func(p *ScheduleParams) { p.Name = "" }, "schedule name is empty; it must be 1 to 200 characters"},
		{"long name", func(p *ScheduleParams) { p.Name = strings.Repeat("n", 201) }, "schedule name is 201 characters; the limit is 200"},
		{"bad expression", func(p *ScheduleParams) { p.Expression = "@fortnightly" }, "unknown descriptor @fortnightly"},
		{"bad zone", func(p *ScheduleParams) { p.TimeZone = "Mars/Base" }, `unknown time zone "Mars/Base"`},
		{"bad target type", func(p *ScheduleParams) { p.TargetType = "email" }, `target type "email" is invalid`},
		{"empty target", func(p *ScheduleParams) { p.Target = "" }, "target is empty; it must be 1 to 200 characters"},
		{"long target", func(p *ScheduleParams) { p.Target = strings.Repeat("t", 201) }, "target is 201 characters; the limit is 200"},
		{"target not UTF-8", func(p *ScheduleParams) { p.Target = "k\xff" }, `target "k\xff" is not valid UTF-8`},
		{"name not UTF-8", func(p *ScheduleParams) { p.Name = "n\xff" }, `schedule name "n\xff" is not valid UTF-8`},
		{"long description", func(p *ScheduleParams) { p.Description = strings.Repeat("d", 2001) }, "description is 2001 characters; the limit is 2000"},
		{"NUL in the description", func(p *ScheduleParams) { p.Description = "a\x00b" }, `description "a\x00b" holds a NUL character, which PostgreSQL cannot store`},
		{"description not UTF-8", func(p *ScheduleParams) { p.Description = "\xff" }, `description "\xff" is not valid UTF-8`},
		{"long created by", func(p *ScheduleParams) { p.CreatedBy = strings.Repeat("c", 201) }, "created by is 201 characters; the limit is 200"},
		{"NUL in created by", func(p *ScheduleParams) { p.CreatedBy = "ops\x00" }, `created by "ops\x00" holds a NUL character, which PostgreSQL cannot store`},
		{"job kind over River's limit", func(p *ScheduleParams) { p.Target = strings.Repeat("k", 128) },
			"is a job kind of 128 characters; River's limit for a job kind is 127"},
		{"job args not an object", func(p *ScheduleParams) { p.Args = []int{1} }, "args of a job target must be a JSON object, got [1]"},
		{"args not JSON", func(p *ScheduleParams) { p.Args = json.RawMessage(`{`) }, "args are not valid JSON"},
		{"args not encodable", func(p *ScheduleParams) { p.Args = make(chan int) }, "args cannot be encoded as JSON"},
		{"bad queue", func(p *ScheduleParams) { p.Queue = "Bad Queue" }, `queue "Bad Queue" is invalid`},
		{"bad priority", func(p *ScheduleParams) { p.Priority = 5 }, "priority 5 is out of range 1-4"},
		{"negative attempts", func(p *ScheduleParams) { p.MaxAttempts = -1 }, "max attempts -1 is outside 0-32767"},
		{"attempts over River's smallint", func(p *ScheduleParams) { p.MaxAttempts = 40000 }, "max attempts 40000 is outside 0-32767"},
		{"bad overlap", func(p *ScheduleParams) { p.OverlapPolicy = "queue" }, `overlap policy "queue" is invalid`},
		{"bad catch-up", func(p *ScheduleParams) { p.CatchUpPolicy = "twice" }, `catch-up policy "twice" is invalid`},
	}
	for _, tt := range tests {
		p := valid()
		tt.change(&p)
		_, err := s.Create(context.Background(), &p)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error = %v, want it to contain %q", tt.name, err, tt.want)
		}
		if !errors.Is(err, ErrInvalidSchedule) {
			t.Errorf("%s: error %v does not match ErrInvalidSchedule", tt.name, err)
		}
	}
	if n := queryValue[int](t, pool, "SELECT count(*) FROM braid_schedules"); n != 0 {
		t.Errorf("%d schedules stored by invalid creates", n)
	}
	if _, err := s.Create(context.Background(), nil); err == nil {
		t.Error("Create(nil) succeeded")
	}
}

// setDue moves a schedule's next slot to the given SQL expression.
func setDue(t *testing.T, s *Scheduler, name, sqlTime string) time.Time {
	t.Helper()
	return queryValue[time.Time](t, s.pool, `UPDATE braid_schedules SET next_run_at = `+sqlTime+` WHERE name = $1 RETURNING next_run_at`, name)
}

func TestFireJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.DB(t)
	s := newScheduler(t, pool, &Config{Queue: insertOnlyQueue(t, pool)})

	if _, err := s.Create(ctx, &ScheduleParams{
		TargetType: TargetJob,
		Name:       "report", Expression: "@every 1h", Target: "report", Args: map[string]string{"to": "ops"},
		Queue: "reports", Priority: 3, MaxAttempts: 5,
	}); err != nil {
		t.Fatal(err)
	}
	tick(t, s)
	if jobs := firedJobs(t, pool, "report"); len(jobs) != 0 {
		t.Fatalf("fired before due: %+v", jobs)
	}

	slot := setDue(t, s, "report", "date_trunc('second', now()) - interval '1 second'")
	tick(t, s)
	jobs := firedJobs(t, pool, "report")
	want := []firedJob{{
		ID: jobs[0].ID, Kind: "report", Args: `{"to": "ops"}`, Queue: "reports", Priority: 3, MaxAttempts: 5,
		Schedule: "report", Slot: slotString(slot), FirstSlot: slotString(slot),
	}}
	if diff := cmp.Diff(want, jobs); diff != "" {
		t.Fatalf("fired jobs (-want +got):\n%s", diff)
	}
	sch, err := s.Get(ctx, "report")
	if err != nil {
		t.Fatal(err)
	}
	if !sch.NextRunAt.Equal(slot.Add(time.Hour)) {
		t.Errorf("NextRunAt = %s, want %s", sch.NextRunAt, slot.Add(time.Hour))
	}
	if sch.LastJobID == nil || *sch.LastJobID != jobs[0].ID || sch.LastRunAt == nil {
		t.Errorf("last job %v at %v, want job %d", sch.LastJobID, sch.LastRunAt, jobs[0].ID)
	}

	// Were the same slot fired again (the row set back by hand), the
	// idempotency key of the slot keeps it one job.
	exec(t, pool, `UPDATE braid_schedules SET next_run_at = $1 WHERE name = 'report'`, slot)
	tick(t, s)
	if again := firedJobs(t, pool, "report"); len(again) != 1 {
		t.Errorf("slot fired twice: %+v", again)
	}
	if sch, _ := s.Get(ctx, "report"); !sch.NextRunAt.Equal(slot.Add(time.Hour)) || *sch.LastJobID != jobs[0].ID {
		t.Errorf("after a repeated slot: next %s, last job %d", sch.NextRunAt, *sch.LastJobID)
	}

	// A disabled schedule does not fire.
	if _, err := s.Toggle(ctx, "report", false); err != nil {
		t.Fatal(err)
	}
	setDue(t, s, "report", "now() - interval '1 second'")
	tick(t, s)
	if n := len(firedJobs(t, pool, "report")); n != 1 {
		t.Errorf("%d jobs after firing a disabled schedule, want 1", n)
	}
}

func TestCronSlotsInZone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.DB(t)
	s := newScheduler(t, pool, &Config{Queue: insertOnlyQueue(t, pool)})

	// 01:30 on November 1-3 in New York, fired from 2025-10-31 on: across
	// the 2025-11-02 fall-back, 01:30 fires once (EDT) and the day after
	// in EST.
	if _, err := s.Create(ctx, &ScheduleParams{TargetType: TargetJob, Name: "ny", Expression: "30 1 1-3 11 *", TimeZone: "America/New_York",
		Target: "k", CatchUpPolicy: CatchUpAll, OverlapPolicy: OverlapAllow}); err != nil {
		t.Fatal(err)
	}
	setDue(t, s, "ny", "'2025-11-01T05:30:00Z'")
	tick(t, s)
	var slots []string
	for _, j := range firedJobs(t, pool, "ny") {
		slots = append(slots, j.Slot)
	}
	if len(slots) < 3 {
		t.Fatalf("fired slots %v, want at least 3", slots)
	}
	want := []string{"2025-11-01T05:30:00Z", "2025-11-02T05:30:00Z", "2025-11-03T06:30:00Z"}
	if diff := cmp.Diff(want, slots[:3]); diff != "" {
		t.Errorf("slots (-want +got):\n%s", diff)
	}
	sch, _ := s.Get(ctx, "ny")
	e := MustParse("30 1 1-3 11 *", "America/New_York")
	last, _ := time.Parse(time.RFC3339, slots[len(slots)-1])
	if !sch.NextRunAt.Equal(e.Next(last)) || !sch.NextRunAt.After(time.Now()) {
		t.Errorf("NextRunAt = %s, want %s, after now", sch.NextRunAt, e.Next(last))
	}
}

func TestCatchUp(t *testing.T) {
	t.Parallel()

	tests := []struct {
		policy     CatchUpPolicy
		overlap    OverlapPolicy
		behind     string // how far the first due slot is behind now
		wantFired  []int  // fired slots, as hours after the first due slot
		wantFirsts []int  // their first slots
		wantNext   time.Duration
	}{
		{CatchUpOnce, OverlapAllow, "3 hours 30 minutes", []int{3}, []int{0}, 4 * time.Hour},
		{CatchUpSkip, OverlapAllow, "3 hours 30 minutes", nil, nil, 4 * time.Hour},
		{CatchUpAll, OverlapAllow, "3 hours 30 minutes", []int{0, 1, 2, 3}, []int{0, 1, 2, 3}, 4 * time.Hour},
		// The overlap policy judges each missed slot: under OverlapSkip,
		// each slot after the first finds the fire before it unfinished.
		{CatchUpAll, OverlapSkip, "3 hours 30 minutes", []int{0}, []int{0}, 4 * time.Hour},
		// Within Config.MissedSlotGrace a late slot still fires under skip.
		{CatchUpSkip, OverlapAllow, "2 seconds", []int{0}, []int{0}, time.Hour},
	}
	for _, tt := range tests {
		t.Run(string(tt.policy)+" "+string(tt.overlap)+" "+tt.behind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool := testdb.DB(t)
			s := newScheduler(t, pool, &Config{Queue: insertOnlyQueue(t, pool)})
			if _, err := s.Create(ctx, &ScheduleParams{TargetType: TargetJob, Name: "c", Expression: "@every 1h", Target: "k", CatchUpPolicy: tt.policy, OverlapPolicy: tt.overlap}); err != nil {
				t.Fatal(err)
			}
			first := setDue(t, s, "c", "date_trunc('second', now()) - interval '"+tt.behind+"'")
			tick(t, s)

			var got, gotFirsts []string
			for _, j := range firedJobs(t, pool, "c") {
				got, gotFirsts = append(got, j.Slot), append(gotFirsts, j.FirstSlot)
			}
			var want, wantFirsts []string
			for i, h := range tt.wantFired {
				want = append(want, slotString(first.Add(time.Duration(h)*time.Hour)))
				wantFirsts = append(wantFirsts, slotString(first.Add(time.Duration(tt.wantFirsts[i])*time.Hour)))
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("fired slots (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(wantFirsts, gotFirsts); diff != "" {
				t.Errorf("first slots (-want +got):\n%s", diff)
			}
			sch, err := s.Get(ctx, "c")
			if err != nil {
				t.Fatal(err)
			}
			if want := first.Add(tt.wantNext); !sch.NextRunAt.Equal(want) {
				t.Errorf("NextRunAt = %s, want %s", sch.NextRunAt, want)
			}
		})
	}
}

func TestOverlap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.DB(t)
	s := newScheduler(t, pool, &Config{Queue: insertOnlyQueue(t, pool)})

	for _, p := range []OverlapPolicy{OverlapSkip, OverlapAllow} {
		if _, err := s.Create(ctx, &ScheduleParams{TargetType: TargetJob, Name: string(p), Expression: "@every 1h", Target: "k", OverlapPolicy: p}); err != nil {
			t.Fatal(err)
		}
	}
	// Each fire gets a slot of its own: a slot fired twice would be the
	// same job by its idempotency key.
	behind := 0
	fire := func() {
		t.Helper()
		behind++
		for _, name := range []string{"skip", "allow"} {
			setDue(t, s, name, fmt.Sprintf("date_trunc('second', now()) - interval '%d minutes'", behind))
		}
		tick(t, s)
	}
	fire()
	fire() // the first jobs are still available: skip skips, allow fires
	if n := len(firedJobs(t, pool, "skip")); n != 1 {
		t.Errorf("skip fired %d jobs while the first was unfinished, want 1", n)
	}
	if n := len(firedJobs(t, pool, "allow")); n != 2 {
		t.Errorf("allow fired %d jobs, want 2", n)
	}
	sch, _ := s.Get(ctx, "skip")
	if !sch.NextRunAt.After(time.Now().Add(30 * time.Minute)) {
		t.Errorf("skipped slot did not advance next_run_at: %s", sch.NextRunAt)
	}

	for _, state := range []string{"running", "retryable", "scheduled"} {
		exec(t, pool, `UPDATE river_job SET state = $1 WHERE metadata->>'braid_schedule' = 'skip'`, state)
		fire()
		if n := len(firedJobs(t, pool, "skip")); n != 1 {
			t.Errorf("skip fired while the previous job was %s", state)
		}
	}
	exec(t, pool, `UPDATE river_job SET state = 'completed', finalized_at = now() WHERE metadata->>'braid_schedule' = 'skip'`)
	fire()
	if n := len(firedJobs(t, pool, "skip")); n != 2 {
		t.Errorf("skip fired %d jobs after the previous completed, want 2", n)
	}
	// A previous job that was deleted counts as finished.
	exec(t, pool, `DELETE FROM river_job WHERE metadata->>'braid_schedule' = 'skip'`)
	fire()
	if n := len(firedJobs(t, pool, "skip")); n != 1 {
		t.Errorf("skip fired %d jobs after the previous was deleted, want 1 new", n)
	}
}

// fakeEngine starts workflow runs as rows of braid_runs, honouring
// idempotency keys, as the engine does.
type fakeEngine struct {
	fail error
}

func (f *fakeEngine) StartWorkflowTx(ctx context.Context, tx pgx.Tx, workflow string, input json.RawMessage, key string) (string, error) {
	if f.fail != nil {
		return "", f.fail
	}
	var id string
	err := tx.QueryRow(ctx, `
WITH ins AS (
    INSERT INTO braid_runs (id, workflow, input, idempotency_key, status) VALUES ($1, $2, $3, $4, 'running')
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING RETURNING id
)
SELECT id::text FROM ins UNION ALL SELECT id::text FROM braid_runs WHERE idempotency_key = $4 LIMIT 1`,
		uuid.Must(uuid.NewV7()), workflow, input, key).Scan(&id)
	return id, err
}

func TestFireWorkflow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.DB(t)
	engine := &fakeEngine{}
	s := newScheduler(t, pool, &Config{Queue: insertOnlyQueue(t, pool), Workflows: engine})

	if _, err := s.Create(ctx, &ScheduleParams{Name: "digest", Expression: "@every 1h", TargetType: TargetWorkflow, Target: "send_digest", Args: json.RawMessage(`"weekly"`)}); err != nil {
		t.Fatal(err)
	}
	// Each fire gets a slot of its own: a slot fired twice would start the
	// same run again by its idempotency key.
	behind := 0
	due := func() time.Time {
		behind++
		return setDue(t, s, "digest", fmt.Sprintf("date_trunc('second', now()) - interval '%d minutes'", behind))
	}
	slot := due()
	tick(t, s)

	type run struct{ ID, Workflow, Input, Key string }
	runs := func() []run {
		rows, _ := pool.Query(ctx, `SELECT id::text, workflow, input::text, idempotency_key FROM braid_runs ORDER BY created_at`)
		list, err := pgx.CollectRows(rows, pgx.RowToStructByPos[run])
		if err != nil {
			t.Fatal(err)
		}
		return list
	}
	got := runs()
	want := []run{{ID: got[0].ID, Workflow: "send_digest", Input: `"weekly"`, Key: "schedule:digest:" + slotString(slot)}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("runs (-want +got):\n%s", diff)
	}
	if key := IdempotencyKey("digest", slot); key != got[0].Key {
		t.Errorf("IdempotencyKey = %q, stored %q", key, got[0].Key)
	}
	sch, _ := s.Get(ctx, "digest")
	if sch.LastRunID != got[0].ID || sch.LastJobID != nil {
		t.Errorf("last run %q job %v, want run %s", sch.LastRunID, sch.LastJobID, got[0].ID)
	}

	// Overlap skip: the run is still running.
	due()
	tick(t, s)
	if n := len(runs()); n != 1 {
		t.Errorf("%d runs while the first was running, want 1", n)
	}
	exec(t, pool, `UPDATE braid_runs SET status = 'completed'`)
	due()
	tick(t, s)
	if n := len(runs()); n != 2 {
		t.Errorf("%d runs after the first completed, want 2", n)
	}

	// A failing start keeps the slot due, records the error and holds the
	// slot back; it does not start a run.
	engine.fail = errors.New("engine down")
	exec(t, pool, `UPDATE braid_runs SET status = 'completed'`)
	failed := due()
	tick(t, s)
	if n := len(runs()); n != 2 {
		t.Errorf("%d runs after a failed start, want 2", n)
	}
	sch, _ = s.Get(ctx, "digest")
	if !sch.NextRunAt.Equal(failed) || !strings.Contains(sch.LastError, "engine down") || sch.LastErrorAt == nil ||
		sch.FireFailures != 1 || sch.RetryAt == nil || !sch.RetryAt.After(*sch.LastErrorAt) {
		t.Errorf("after a failed start: next %s (want %s), error %q at %v, failures %d, retry at %v",
			sch.NextRunAt, failed, sch.LastError, sch.LastErrorAt, sch.FireFailures, sch.RetryAt)
	}

	// Without a WorkflowStarter the slot is held back the same way.
	s2 := newScheduler(t, pool, &Config{Queue: insertOnlyQueue(t, pool)})
	exec(t, pool, `UPDATE braid_schedules SET retry_at = NULL`)
	tick(t, s2)
	if n := len(runs()); n != 2 {
		t.Errorf("%d runs without a WorkflowStarter, want 2", n)
	}
	sch, _ = s.Get(ctx, "digest")
	if !sch.NextRunAt.Equal(failed) || !strings.Contains(sch.LastError, "Config.Workflows is nil") || sch.FireFailures != 2 {
		t.Errorf("without a WorkflowStarter: next %s (want %s), error %q, failures %d", sch.NextRunAt, failed, sch.LastError, sch.FireFailures)
	}

	// Once the engine is back, the held slot fires with its own time and
	// the error is cleared.
	engine.fail = nil
	exec(t, pool, `UPDATE braid_schedules SET retry_at = NULL`)
	tick(t, s)
	got = runs()
	if len(got) != 3 || got[2].Key != IdempotencyKey("digest", failed) {
		t.Fatalf("runs after recovery: %+v; want a third with the key of slot %s", got, failed)
	}
	sch, _ = s.Get(ctx, "digest")
	if sch.LastError != "" || sch.LastErrorAt != nil || sch.FireFailures != 0 || sch.RetryAt != nil || !sch.NextRunAt.Equal(failed.Add(time.Hour)) {
		t.Errorf("after recovery: %+v", sch)
	}
}

func TestFireFailuresDoNotBlockOthers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.DB(t)
	workers := river.NewWorkers()
	river.AddWorker(workers, &pingWorker{fn: func(context.Context, *river.Job[pingArgs]) error { return nil }})
	q, err := queue.New(pool, &queue.Config{Logger: quietLogger(), Workers: workers})
	if err != nil {
		t.Fatal(err)
	}
	s := newScheduler(t, pool, &Config{Queue: q})
	// A scheduler without a queue cannot tell which kinds exist, so it
	// accepts the unknown kind that s would refuse.
	blind := newScheduler(t, pool, nil)

	for _, p := range []ScheduleParams{
		{TargetType: TargetJob, Name: "a-unknown", Expression: "@every 1h", Target: "no_such_kind"},
		{TargetType: TargetJob, Name: "b-broken", Expression: "@every 1h", Target: "ping"},
		{TargetType: TargetJob, Name: "c-ok", Expression: "@every 1h", Target: "ping"},
	} {
		if _, err := blind.Create(ctx, &p); err != nil {
			t.Fatal(err)
		}
		setDue(t, s, p.Name, "date_trunc('second', now()) - interval '1 second'")
	}
	// A row edited around the API with an expression that no longer parses
	// is a failed fire, held back by the backoff rather than tried again
	// and again, and left enabled for a leader that can read it.
	exec(t, pool, `UPDATE braid_schedules SET expression = 'bogus' WHERE name = 'b-broken'`)
	tick(t, s)

	if n := len(firedJobs(t, pool, "a-unknown")); n != 0 {
		t.Errorf("unknown kind fired %d jobs", n)
	}
	if sch, _ := s.Get(ctx, "a-unknown"); sch.NextRunAt.After(time.Now()) || sch.RetryAt == nil || !strings.Contains(sch.LastError, "no_such_kind") {
		t.Errorf("unknown kind: next %s, retry at %v, error %q; want the slot held back with the error", sch.NextRunAt, sch.RetryAt, sch.LastError)
	}
	if sch, _ := s.Get(ctx, "b-broken"); !sch.Enabled || sch.RetryAt == nil || sch.FireFailures != 1 || !strings.Contains(sch.LastError, "bogus") {
		t.Errorf("schedule with an invalid stored expression: enabled %t, retry at %v, failures %d, error %q; want it enabled, held back with the error",
			sch.Enabled, sch.RetryAt, sch.FireFailures, sch.LastError)
	}
	if n := len(firedJobs(t, pool, "b-broken")); n != 0 {
		t.Errorf("the schedule with an invalid stored expression fired %d jobs", n)
	}
	if n := len(firedJobs(t, pool, "c-ok")); n != 1 {
		t.Errorf("healthy schedule fired %d jobs, want 1", n)
	}
}

func TestCreateWithoutTargetTypeIsAnError(t *testing.T) {
	t.Parallel()
	pool := testdb.DB(t)
	s := newScheduler(t, pool, nil)
	_, err := s.Create(context.Background(), &ScheduleParams{Name: "untyped", Expression: "@daily", Target: "ping"})
	if err == nil || !strings.Contains(err.Error(), `target type "" is invalid; use "job" or "workflow"`) {
		t.Fatalf("Create without a target type: %v, want an error naming the target types", err)
	}
	if _, err := s.Get(context.Background(), "untyped"); !errors.Is(err, ErrScheduleNotFound) {
		t.Fatalf("the invalid schedule was stored: %v", err)
	}
}

// TestUpdateWithNilArgsOfATypeKeepsTheArgs: ScheduleUpdate.Args left nil
// keeps a schedule's args, and so does a nil of a type (a json.RawMessage,
// a map or a pointer that the caller's own optional field held): only
// args given change them.
func TestUpdateWithNilArgsOfATypeKeepsTheArgs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.DB(t)
	s := newScheduler(t, pool, nil)
	if _, err := s.Create(ctx, &ScheduleParams{TargetType: TargetJob, Name: "nightly", Expression: "@daily", Target: "report",
		Args: map[string]int{"days": 1}}); err != nil {
		t.Fatal(err)
	}
	var noPointer *struct{ Days int }
	for _, args := range []any{nil, json.RawMessage(nil), map[string]int(nil), noPointer} {
		desc := fmt.Sprintf("args %T(nil)", args)
		sch, err := s.Update(ctx, "nightly", &ScheduleUpdate{Description: &desc, Args: args})
		if err != nil {
			t.Fatalf("Update with %s: %v", desc, err)
		}
		if string(sch.Args) != `{"days": 1}` {
			t.Errorf("Update with %s left args %s; want them kept, {\"days\": 1}", desc, sch.Args)
		}
	}
}
