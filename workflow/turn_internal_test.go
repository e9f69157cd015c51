package workflow

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/google/uuid"
	"github.com/riverqueue/river/rivertype"
)

func TestReadsChildrenOnlySkipsTheFirstAttemptOfAFunctionsFirstTurn(t *testing.T) {
	t.Parallel()
	fn := &definition{name: "fn"}
	dag := &definition{name: "graph", dag: &dagSpec{}}
	first := []string{"feeds", "first_turn"}
	for _, tc := range []struct {
		name    string
		tags    []string
		attempt int
		def     *definition
		want    bool
	}{
		{"first turn, first attempt", first, 1, fn, false},
		{"first turn, a later attempt", first, 2, fn, true},
		{"first turn of a DAG", first, 1, dag, true},
		{"a later turn", []string{"feeds"}, 1, fn, true},
		{"no tags", nil, 1, fn, true},
		{"a tag that only looks like it", []string{"first_turns"}, 1, fn, true},
	} {
		job := &rivertype.JobRow{Attempt: tc.attempt, Tags: tc.tags}
		if got := readsChildren(job, tc.def); got != tc.want {
			t.Errorf("%s: readsChildren = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestMayHaveChildrenUnlessAKnownFunctionsFirstTurn(t *testing.T) {
	t.Parallel()
	fn := &definition{name: "fn"}
	dag := &definition{name: "graph", dag: &dagSpec{}}
	for _, tc := range []struct {
		name  string
		first bool
		def   *definition
		want  bool
	}{
		{"first turn of a function", true, fn, false},
		{"later turn of a function", false, fn, true},
		{"first turn of a DAG", true, dag, true},
		{"first turn of a workflow this process does not know", true, nil, true},
	} {
		if got := mayHaveChildren(tc.first, tc.def); got != tc.want {
			t.Errorf("%s: mayHaveChildren = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// turnKeys keys a turn job by its task and drops the insert's trace
// context; a turn job without its task is refused before anything is
// inserted, and jobs of other args pass untouched.
func TestTurnKeysKeysTurnsByTheirTask(t *testing.T) {
	t.Parallel()
	task := uuid.Must(uuid.NewV7())
	turnJob := &rivertype.JobInsertParams{
		Args:     taskArgs{Workflow: "w", task: task},
		Kind:     TaskKind,
		Metadata: []byte(`{"braid_trace": {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}, "other": 1}`),
	}
	other := &rivertype.JobInsertParams{Args: fakeArgs{}, Kind: "other", Metadata: []byte(`{"braid_trace": {}}`)}
	inserted := false
	doInner := func(context.Context) ([]*rivertype.JobInsertResult, error) { inserted = true; return nil, nil }
	if _, err := (&turnKeys{}).InsertMany(context.Background(), []*rivertype.JobInsertParams{turnJob, other}, doInner); err != nil || !inserted {
		t.Fatalf("InsertMany = %v, inserted %t; want nil, true", err, inserted)
	}
	if diff := cmp.Diff([]any{task[:], turnLiveStates, `{"other":1}`, []byte(nil), `{"braid_trace": {}}`},
		[]any{turnJob.UniqueKey, turnJob.UniqueStates, string(turnJob.Metadata), other.UniqueKey, string(other.Metadata)}); diff != "" {
		t.Errorf("keys and metadata (-want +got):\n%s", diff)
	}
	id, err := turnTask(&rivertype.JobRow{UniqueKey: turnJob.UniqueKey}, taskArgs{})
	if err != nil || id != task {
		t.Errorf("turnTask of the keyed job = %s, %v; want %s", id, err, task)
	}

	inserted = false
	_, err = (&turnKeys{}).InsertMany(context.Background(), []*rivertype.JobInsertParams{{Args: taskArgs{Workflow: "w"}, Kind: TaskKind}}, doInner)
	if err == nil || inserted || !strings.Contains(err.Error(), `workflow "w"`) {
		t.Errorf("InsertMany of a turn without its task = %v, inserted %t; want an error naming the workflow and nothing inserted", err, inserted)
	}
	if _, err := turnTask(&rivertype.JobRow{ID: 7}, taskArgs{TaskID: "not-a-uuid"}); err == nil || !strings.Contains(err.Error(), "turn job 7 names no task") {
		t.Errorf("turnTask of a job with neither key nor task = %v, want an error naming the job", err)
	}
}

type fakeArgs struct{}

func (fakeArgs) Kind() string { return "other" }

// stepCauses names the errors a step's error is, in chains and joins, and
// the standard sentinels it matches through an Is method, once each,
// leaving out what cannot be named (too long, not text, a nil pointer)
// and what exceeds its budget; StepError.Is matches them by type and
// message, so a look-alike of a sentinel does not match.
func TestStepCausesAndStepErrorIs(t *testing.T) {
	t.Parallel()
	notFound := errors.New("not found")
	gone := errors.New("gone")
	long := errors.New(strings.Repeat("x", stepCauseMaxBytes+1))
	nul := errors.New("bad\x00byte")
	var typedNil *nilError
	missing := &fs.PathError{Op: "open", Path: "/nowhere", Err: syscall.ENOENT}
	err := fmt.Errorf("lookup: %w", errors.Join(fmt.Errorf("cache: %w", notFound), notFound, gone, long, nul, typedNil, missing))
	got := stepCauses(err, 1<<20)
	name := func(e error) string { n, _ := causeName(e); return n }
	want := []string{name(err), name(fmt.Errorf("cache: %w", notFound)), name(notFound), name(gone), name(missing), name(syscall.ENOENT), name(fs.ErrNotExist)}
	if diff := cmp.Diff(want, got, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("stepCauses (-want +got):\n%s", diff)
	}
	for i := 1; i < len(got); i++ {
		if len(got[i]) < len(got[i-1]) {
			t.Errorf("stepCauses keeps %q before the shorter %q", got[i-1], got[i])
		}
	}
	se := &StepError{Step: "lookup", Attempts: 1, Message: err.Error(), causes: got}
	for _, tc := range []struct {
		target error
		want   bool
	}{
		{notFound, true}, {gone, true}, {err, true}, {fs.ErrNotExist, true}, {syscall.ENOENT, true},
		{long, false}, {errors.New("other"), false}, {nil, false},
		{errors.New("context canceled"), false}, // a look-alike is not context.Canceled
		{context.Canceled, false},
	} {
		if is := errors.Is(se, tc.target); is != tc.want {
			t.Errorf("errors.Is(StepError, %T %v) = %t; want %t", tc.target, tc.target, is, tc.want)
		}
	}
	if is := errors.Is(&StepError{Step: "old", Message: "not found"}, notFound); is {
		t.Error("a failure recorded without causes matched by its message")
	}
	many := errors.New("root")
	for i := range 2 * stepCausesMax {
		many = fmt.Errorf("layer %d: %w", i, many)
	}
	if n := len(stepCauses(many, 1<<20)); n != stepCausesMax {
		t.Errorf("a deep chain kept %d causes; want %d", n, stepCausesMax)
	}
	// A budget for one name keeps the shortest: the sentinel, not the
	// long outer error that repeats its text.
	if got := stepCauses(err, len(name(gone))); !cmp.Equal(got, []string{name(gone)}) {
		t.Errorf("a budget for the shortest name kept %v", got)
	}
}

// nilError panics in Error on a nil receiver, as a careless error type
// does.
type nilError struct{ field string }

func (e *nilError) Error() string { return "invalid " + e.field }
