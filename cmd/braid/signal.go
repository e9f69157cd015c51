package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/workflow"
)

// signalKeyMax bounds a signal's idempotency key, in bytes, as the engine
// does.
const signalKeyMax = 500

// signalView is a sent signal as `braid runs signal --json` prints it.
type signalView struct {
	RunID          string `json:"run_id"`
	Workflow       string `json:"workflow"`
	Signal         string `json:"signal"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// runsSignal sends a signal to a run, by its ID or, with --by-key, by the
// idempotency key it was started with. A task of the run that waits on the
// signal gets its next turn; otherwise the signal stays in the run's
// mailbox until a wait takes it.
func runsSignal(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("runs signal")
	payload := fs.String("payload", "null", "the signal's payload, as JSON")
	key := fs.String("key", "", fmt.Sprintf("an idempotency key: the run takes one signal per key, however often it is sent (at most %d bytes)", signalKeyMax))
	byKey := fs.Bool("by-key", false, "RUN is the idempotency key the run was started with, not its ID")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(rest, "RUN", "NAME"); err != nil {
		return err
	}
	target, name := rest[0], rest[1]
	if !*byKey {
		if _, err := uuid.Parse(target); err != nil {
			return usagef("invalid run ID %q: a run ID is a UUID (with --by-key, RUN is the run's idempotency key)", target)
		}
	} else if target == "" {
		return usagef("empty idempotency key: with --by-key, RUN is the key the run was started with")
	}
	if err := messageName("signal name", name); err != nil {
		return err
	}
	if len(*key) > signalKeyMax {
		return usagef("--key is %d bytes, over the limit of %d", len(*key), signalKeyMax)
	}
	raw, err := jsonFlag("payload", *payload)
	if err != nil {
		return err
	}
	pool, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	eng, err := runEngine(pool)
	if err != nil {
		return err
	}
	opts := &workflow.SignalOpts{IdempotencyKey: *key}
	if *byKey {
		err = eng.SignalByKey(ctx, target, name, raw, opts)
	} else {
		err = eng.Signal(ctx, target, name, raw, opts)
	}
	_ = eng.Stop(context.WithoutCancel(ctx))
	if err != nil {
		return signalError(ctx, pool, target, *byKey, name, err)
	}
	run, err := signalledRun(ctx, pool, target, *byKey)
	if err != nil {
		return err
	}
	v := signalView{RunID: run.ID, Workflow: run.Workflow, Signal: name, IdempotencyKey: *key}
	return c.emit(v, func(w *tabwriter.Writer) {
		line := fmt.Sprintf("sent signal %q to run %s (%s)", name, run.ID, run.Workflow)
		if *key != "" {
			line += fmt.Sprintf(", once for idempotency key %q", *key)
		}
		row(w, line)
	})
}

// signalledRun finds the run a signal went to, by its ID or by its
// idempotency key.
func signalledRun(ctx context.Context, pool *pgxpool.Pool, target string, byKey bool) (*workflow.RunInfo, error) {
	if !byKey {
		return workflow.Inspect(ctx, pool, target)
	}
	runs, err := workflow.ListRuns(ctx, pool, workflow.RunFilter{IdempotencyKey: target, Limit: 1})
	if err != nil {
		return nil, err
	}
	if len(runs) == 0 {
		return nil, fmt.Errorf("no run has the idempotency key %q", target)
	}
	return runs[0], nil
}

// signalError turns the engine's errors about a signal into one plain
// sentence naming the run.
func signalError(ctx context.Context, pool *pgxpool.Pool, target string, byKey bool, name string, err error) error {
	var tooLarge *workflow.PayloadTooLargeError
	switch {
	case errors.Is(err, workflow.ErrRunNotFound) && byKey:
		return fmt.Errorf("no run has the idempotency key %q", target)
	case errors.Is(err, workflow.ErrRunNotFound):
		return fmt.Errorf("run %s not found", target)
	case errors.Is(err, workflow.ErrRunFinished):
		what, status := "run "+target, "finished"
		if run, ferr := signalledRun(ctx, pool, target, byKey); ferr == nil {
			what, status = "run "+run.ID, run.Status
		}
		return fmt.Errorf("%s is already %s; signal %q is not sent: a finished run takes no signals", what, status, name)
	case errors.As(err, &tooLarge):
		return fmt.Errorf("--payload is %d bytes, over the limit of %d bytes", tooLarge.Size, tooLarge.Limit)
	}
	return err
}

// messageName checks a signal's name or an event's topic against the
// engine's rules before any database is needed.
func messageName(what, name string) error {
	switch {
	case name == "":
		return usagef("%s is empty", what)
	case len(name) > workflow.MessageNameMax:
		return usagef("%s %.40q… is %d bytes, over the limit of %d", what, name, len(name), workflow.MessageNameMax)
	}
	return nil
}

// jsonFlag checks that the value of the flag name is one JSON value, and
// returns it as is, so that the engine stores it unchanged.
func jsonFlag(name, value string) (json.RawMessage, error) {
	var raw json.RawMessage
	if err := json.Unmarshal([]byte(value), &raw); err != nil {
		return nil, usagef("--%s is not valid JSON: %v", name, err)
	}
	return raw, nil
}
