package queue

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivershared/baseservice"
	"github.com/riverqueue/river/rivershared/riverpilot"
	"github.com/riverqueue/river/rivertype"
)

// metadataSuperseded is the key under which the middleware tags the
// outcome of a superseded attempt, in the metadata updates River hands to
// its completer. The pilot drops the tagged update, so the key never
// reaches the database.
const metadataSuperseded = "braid_superseded_attempt"

// metadataFence is the key under which the middleware tags the outcome of
// an attempt that could not check, as it returned, that it still owned
// its job (see jobContext.endUnconfirmed): its value is the attempt's
// fence, the attempt number and start. The pilot writes that outcome only
// while the job runs as that attempt, and strips the key.
const metadataFence = "braid_fence_attempt"

// attemptFence names one execution of a job: River reuses an attempt
// number after a snooze, so its start tells two apart.
type attemptFence struct {
	Attempt     int       `json:"attempt"`
	AttemptedAt time.Time `json:"attempted_at"`
}

// driver is riverpgxv5's driver with braid's pilot. River asks a driver
// for a pilot when the client is built (a driver plugin); everything else
// is riverpgxv5's own, so river.JobCompleteTx[*riverpgxv5.Driver] and the
// other generic helpers work unchanged: they use the client's driver and
// pilot, whatever the driver's concrete type.
type driver struct {
	*riverpgxv5.Driver
	pilot *pilot
}

var _ riverdriver.Driver[pgx.Tx] = (*driver)(nil)

func newDriver(pool *pgxpool.Pool, p *pilot) *driver {
	d := &driver{Driver: riverpgxv5.New(pool), pilot: p}
	p.pool, p.unwrap = pool, d.Driver.UnwrapExecutor
	return d
}

// PluginInit is part of River's driver plugin interface; braid's pilot
// needs nothing from the archetype.
func (d *driver) PluginInit(*baseservice.Archetype) {}

// PluginPilot is part of River's driver plugin interface: it gives River
// braid's pilot.
func (d *driver) PluginPilot() riverpilot.Pilot { return d.pilot }

// pilot is River's standard pilot with one change, to the statement that
// records attempts' outcomes (River's completer, JobCompleteTx and
// friends):
//
//   - it drops the outcome of an attempt this process knows was
//     superseded, so that an attempt that returns after its job was rescued
//     and taken by a later attempt cannot complete, fail or snooze that
//     later attempt (River's statement checks only that the job is
//     running, not which attempt runs it);
//   - it writes an outcome tagged with its attempt (metadataFence: one
//     whose attempt could not check that it still owned its job) only if
//     the job still runs as that attempt, checked under the job row's lock
//     in the transaction that writes it;
//   - it sanitises every attempt error it writes (SanitizeErrorText on the
//     error text and on the panic stack): one NUL byte would otherwise make
//     PostgreSQL reject the whole batch, and River's completer retries a
//     failed batch for ever, stalling every completion of the client.
type pilot struct {
	riverpilot.StandardPilot

	maxErrorBytes int

	// pool and unwrap write fenced outcomes in a transaction of the
	// pilot's own (set by newDriver).
	pool   *pgxpool.Pool
	unwrap func(pgx.Tx) riverdriver.ExecutorTx

	mu sync.Mutex
	// superseded maps a job ID to its attempt that lost the job while it
	// ran and has returned. An entry is forgotten once a batch that
	// dropped its attempt's outcome is written (settle).
	superseded map[int64]int
	// reporting counts, by job ID, live attempts' outcomes handed to
	// River and not yet written by a batch here.
	reporting map[int64]int
	// finished holds the jobs that workers completed in their own
	// committed transactions (Queue.Finished): River's completion of each
	// is dropped, saving a statement per completer batch. An entry is
	// forgotten once a batch with an outcome of that job is written, or
	// by Queue.Finished's caller for a job River never completes (a
	// claimed one).
	finished map[int64]struct{}
	// changed is closed, and replaced, when a written batch settles what
	// it accounted for (settle).
	changed chan struct{}
	dropped atomic.Int64 // outcomes dropped, for tests
	// fenceDropped counts fenced outcomes dropped because their job had
	// gone to another attempt, for tests.
	fenceDropped atomic.Int64
}

// reportWait bounds how long an attempt's return waits for another
// attempt's outcome of the same job to be written; see beforeReport.
const reportWait = 5 * time.Second

func newPilot(maxErrorBytes int) *pilot {
	return &pilot{
		maxErrorBytes: maxErrorBytes,
		superseded:    make(map[int64]int),
		reporting:     make(map[int64]int),
		finished:      make(map[int64]struct{}),
		changed:       make(chan struct{}),
	}
}

// beforeReport runs as an attempt of job id returns, just before River
// hands its outcome to the completer. River's completer keeps one pending
// outcome per job ID, the last one handed to it, so a superseded
// attempt's outcome arriving just after a live attempt's would replace
// it, and the live outcome would be lost with the dropped one. To keep
// them apart, a superseded attempt waits until no live outcome of its job
// is pending, and a live attempt waits until no superseded outcome of its
// job is pending; both checks and registrations are made under one lock,
// so one of the two always goes first. Each wait is bounded by reportWait.
func (p *pilot) beforeReport(id int64, attempt int, superseded bool) {
	deadline := time.Now().Add(reportWait)
	for {
		p.mu.Lock()
		var busy bool
		if superseded {
			p.superseded[id] = attempt
			busy = p.reporting[id] > 0
		} else {
			a, ok := p.superseded[id]
			busy = ok && a != attempt && time.Now().Before(deadline)
			if !busy {
				p.reporting[id]++
			}
		}
		ch := p.changed
		p.mu.Unlock()
		remaining := time.Until(deadline)
		if !busy || remaining <= 0 {
			return
		}
		t := time.NewTimer(remaining)
		select {
		case <-ch:
		case <-t.C:
		}
		t.Stop()
	}
}

// signalLocked wakes beforeReport's waiters. p.mu must be held.
func (p *pilot) signalLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// isSuperseded reports whether attempt of job id is recorded as
// superseded (for tests and logs).
func (p *pilot) isSuperseded(id int64, attempt int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	a, ok := p.superseded[id]
	return ok && a == attempt
}

// JobSetStateIfRunningMany records attempts' outcomes, minus those of
// superseded attempts, with sanitised errors. What it learns of the
// outcomes (a superseded attempt's outcome dropped, a live one written, a
// finished job's completion skipped) is settled only once the statement
// has succeeded: River's completer retries a failed batch with the same
// outcomes, which must then be judged the same way.
func (p *pilot) JobSetStateIfRunningMany(ctx context.Context, exec riverdriver.Executor, params *riverdriver.JobSetStateIfRunningManyParams) ([]*rivertype.JobRow, error) {
	// River's completer retries a failed batch with the same params: the
	// tags stripped below must still be there for the retry.
	params = cloneUpdates(params)
	n := len(params.ID)
	keep := make([]int, 0, n)
	var seen []pilotSeen
	fences := make(map[int]attemptFence)
	p.mu.Lock()
	for i := range n {
		if f, ok := takeFence(params, i); ok {
			fences[i] = f
		}
		drop, s := p.judgeLocked(params, i)
		if s != (pilotSeen{}) {
			seen = append(seen, s)
		}
		if !drop {
			keep = append(keep, i)
		}
	}
	p.mu.Unlock()
	if len(keep) == 0 {
		p.settle(seen)
		return nil, nil
	}
	var fenced []int // positions in keep
	for j, i := range keep {
		if _, ok := fences[i]; ok {
			fenced = append(fenced, j)
		}
	}
	if len(fenced) > 0 {
		return p.writeFenced(ctx, params, keep, fenced, fences, seen)
	}
	return p.write(ctx, exec, params, keep, seen)
}

// write writes the outcomes at keep of params through exec, then settles
// seen.
func (p *pilot) write(ctx context.Context, exec riverdriver.Executor, params *riverdriver.JobSetStateIfRunningManyParams, keep []int, seen []pilotSeen) ([]*rivertype.JobRow, error) {
	n := len(params.ID)
	out := params
	if len(keep) < n {
		out = &riverdriver.JobSetStateIfRunningManyParams{
			ID:              make([]int64, len(keep)),
			Attempt:         make([]*int, len(keep)),
			ErrData:         make([][]byte, len(keep)),
			FinalizedAt:     make([]*time.Time, len(keep)),
			MetadataDoMerge: make([]bool, len(keep)),
			MetadataUpdates: make([][]byte, len(keep)),
			Now:             params.Now,
			ScheduledAt:     make([]*time.Time, len(keep)),
			Schema:          params.Schema,
			State:           make([]rivertype.JobState, len(keep)),
		}
		for j, i := range keep {
			out.ID[j] = params.ID[i]
			out.Attempt[j] = params.Attempt[i]
			out.ErrData[j] = params.ErrData[i]
			out.FinalizedAt[j] = params.FinalizedAt[i]
			out.MetadataDoMerge[j] = params.MetadataDoMerge[i]
			out.MetadataUpdates[j] = params.MetadataUpdates[i]
			out.ScheduledAt[j] = params.ScheduledAt[i]
			out.State[j] = params.State[i]
		}
	}
	for i := range out.ErrData {
		out.ErrData[i] = p.sanitizeErrData(out.ErrData[i])
	}
	for i := range out.MetadataUpdates {
		out.MetadataUpdates[i] = withoutNUL(out.MetadataUpdates[i])
	}
	rows, err := p.StandardPilot.JobSetStateIfRunningMany(ctx, exec, out)
	if err != nil {
		return nil, err
	}
	p.settle(seen)
	return rows, nil
}

// writeFenced writes the outcomes at keep of params in a transaction of its
// own that first locks the jobs of the fenced ones (positions in keep) and
// drops the outcome of each whose job no longer runs as its attempt: the
// rescuer gave it to another attempt while its attempt could not check.
func (p *pilot) writeFenced(ctx context.Context, params *riverdriver.JobSetStateIfRunningManyParams, keep, fenced []int, fences map[int]attemptFence, seen []pilotSeen) ([]*rivertype.JobRow, error) {
	ids := make([]int64, len(fenced))
	attempts := make([]int32, len(fenced))
	starts := make([]time.Time, len(fenced))
	for k, j := range fenced {
		f := fences[keep[j]]
		ids[k], attempts[k], starts[k] = params.ID[keep[j]], int32(f.Attempt), f.AttemptedAt
	}
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	// Every fenced job is locked, the ones still at their attempt too: the
	// rescuer must not give one to another attempt between this check and
	// the write.
	rows, err := tx.Query(ctx, `
SELECT u.id, j.state = 'running' AND (j.attempt <> u.attempt OR j.attempted_at IS DISTINCT FROM u.at)
  FROM unnest($1::bigint[], $2::int[], $3::timestamptz[]) AS u(id, attempt, at)
  JOIN river_job j ON j.id = u.id
 ORDER BY j.id
   FOR UPDATE OF j`, ids, attempts, starts)
	if err != nil {
		return nil, err
	}
	var lost []int64
	var id int64
	var gone bool
	_, err = pgx.ForEachRow(rows, []any{&id, &gone}, func() error {
		if gone {
			lost = append(lost, id)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(lost) > 0 {
		kept := keep[:0:0]
		for _, i := range keep {
			if !slices.Contains(lost, params.ID[i]) {
				kept = append(kept, i)
			}
		}
		keep = kept
	}
	var out []*rivertype.JobRow
	if len(keep) > 0 {
		// write settles seen only once the transaction has committed.
		if out, err = p.write(ctx, p.unwrap(tx), params, keep, nil); err != nil {
			return nil, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	p.fenceDropped.Add(int64(len(lost)))
	p.settle(seen)
	return out, nil
}

// cloneUpdates returns a copy of params whose slices of metadata updates
// and errors are its own, so that changing an entry leaves params as it
// was.
func cloneUpdates(params *riverdriver.JobSetStateIfRunningManyParams) *riverdriver.JobSetStateIfRunningManyParams {
	c := *params
	c.MetadataUpdates = slices.Clone(params.MetadataUpdates)
	c.MetadataDoMerge = slices.Clone(params.MetadataDoMerge)
	c.ErrData = slices.Clone(params.ErrData)
	return &c
}

// takeFence removes the fence tag from update i of params, and returns the
// fence it carried.
func takeFence(params *riverdriver.JobSetStateIfRunningManyParams, i int) (attemptFence, bool) {
	if i >= len(params.MetadataUpdates) || !bytes.Contains(params.MetadataUpdates[i], []byte(`"`+metadataFence+`"`)) {
		return attemptFence{}, false
	}
	var md map[string]json.RawMessage
	if err := json.Unmarshal(params.MetadataUpdates[i], &md); err != nil {
		return attemptFence{}, false
	}
	var f attemptFence
	err := json.Unmarshal(md[metadataFence], &f)
	delete(md, metadataFence)
	if len(md) == 0 {
		params.MetadataUpdates[i], params.MetadataDoMerge[i] = nil, false
	} else if b, merr := json.Marshal(md); merr == nil {
		params.MetadataUpdates[i] = b
	}
	return f, err == nil
}

// pilotSeen is what the pilot learned of one outcome in a batch, settled
// once the batch's statement succeeded (settle).
type pilotSeen struct {
	id int64
	// reported: a live attempt's outcome that beforeReport counted.
	reported bool
	// finished: River's completion of a job its worker completed itself
	// (Queue.Finished), skipped.
	finished bool
	// superseded: the outcome of this superseded attempt, dropped.
	superseded bool
	attempt    int
}

// judgeLocked reports whether update i is to be dropped: the outcome of a
// superseded attempt, or River's completion of a job its worker completed
// itself. An update carrying the tag without a matching record (the tag
// set by hand) is kept, without the tag. It changes none of the pilot's
// records; seen says what settle changes once the batch is written. p.mu
// must be held.
func (p *pilot) judgeLocked(params *riverdriver.JobSetStateIfRunningManyParams, i int) (drop bool, seen pilotSeen) {
	id := params.ID[i]
	seen.id = id
	if i >= len(params.MetadataUpdates) || !bytes.Contains(params.MetadataUpdates[i], []byte(`"`+metadataSuperseded+`"`)) {
		seen.reported = p.reporting[id] > 0
		if _, ok := p.finished[id]; ok {
			// The worker completed its job in its own committed
			// transaction (CompleteTx): this is the outcome of that
			// attempt, so the entry is forgotten once it is written,
			// whatever it is; otherwise a completion of a later attempt
			// (an operator's retry of the job) would be dropped. A
			// plain completion would change nothing, and is dropped;
			// any other outcome is written, and finds the job finished.
			seen.finished = true
			plain := params.State[i] == rivertype.JobStateCompleted && len(params.MetadataUpdates[i]) == 0
			return plain, seen
		}
		if !seen.reported {
			return false, pilotSeen{}
		}
		return false, seen
	}
	var md map[string]json.RawMessage
	if err := json.Unmarshal(params.MetadataUpdates[i], &md); err != nil {
		return false, pilotSeen{}
	}
	var attempt int
	if err := json.Unmarshal(md[metadataSuperseded], &attempt); err == nil {
		if a, ok := p.superseded[id]; ok && a == attempt {
			seen.superseded, seen.attempt = true, attempt
			return true, seen
		}
	}
	delete(md, metadataSuperseded)
	if len(md) == 0 {
		params.MetadataUpdates[i], params.MetadataDoMerge[i] = nil, false
		return false, pilotSeen{}
	}
	if b, err := json.Marshal(md); err == nil {
		params.MetadataUpdates[i] = b
	}
	return false, pilotSeen{}
}

// settle forgets what a written batch accounted for: the live outcomes
// beforeReport counted, the finished jobs whose completion was skipped,
// the superseded attempts whose outcomes were dropped; and wakes
// beforeReport's waiters.
func (p *pilot) settle(seen []pilotSeen) {
	if len(seen) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range seen {
		if s.reported {
			if c := p.reporting[s.id]; c > 1 {
				p.reporting[s.id] = c - 1
			} else {
				delete(p.reporting, s.id)
			}
		}
		if s.finished {
			delete(p.finished, s.id)
		}
		if s.superseded {
			if a, ok := p.superseded[s.id]; ok && a == s.attempt {
				delete(p.superseded, s.id)
			}
			p.dropped.Add(1)
		}
	}
	p.signalLocked()
}

// sanitizeErrData passes the text and the stack of an encoded
// rivertype.AttemptError through SanitizeErrorText.
func (p *pilot) sanitizeErrData(data []byte) []byte {
	if len(data) == 0 {
		return data
	}
	var ae rivertype.AttemptError
	if err := json.Unmarshal(data, &ae); err != nil {
		// Not an AttemptError: River never writes one; strip what
		// PostgreSQL's jsonb would reject at least.
		return withoutNUL(data)
	}
	msg, trace := SanitizeErrorText(ae.Error, p.maxErrorBytes), SanitizeErrorText(ae.Trace, p.maxErrorBytes)
	if msg == ae.Error && trace == ae.Trace {
		return data
	}
	ae.Error, ae.Trace = msg, trace
	b, err := json.Marshal(ae)
	if err != nil {
		return withoutNUL(data)
	}
	return b
}

// withoutNUL returns a JSON document as PostgreSQL's jsonb can store it:
// as it is when jsonb takes it (CheckJSONB), and otherwise decoded and
// encoded again, which removes NUL characters from its strings and keys
// and turns a lone UTF-16 surrogate escape (which encoding/json accepts,
// from an upstream API's response recorded as is) into U+FFFD. Metadata
// a worker recorded (River's RecordOutput, MetadataSet) that jsonb
// rejected would otherwise fail the completer's whole batch, which River
// retries for ever, every later outcome of the client with it. A document
// that is still not storable (a number beyond PostgreSQL's numeric) is
// replaced by an empty object, which a merge of metadata leaves as it
// was; one that cannot be decoded is returned as it is, for PostgreSQL to
// judge.
func withoutNUL(data []byte) []byte {
	if len(data) == 0 || CheckJSONB(data) == nil {
		return data
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return data
	}
	b, err := json.Marshal(stripNUL(v))
	if err != nil {
		return data
	}
	if CheckJSONB(b) != nil {
		return []byte(`{}`)
	}
	return b
}

func stripNUL(v any) any {
	switch x := v.(type) {
	case string:
		return strings.ReplaceAll(x, "\x00", "")
	case []any:
		for i := range x {
			x[i] = stripNUL(x[i])
		}
		return x
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[strings.ReplaceAll(k, "\x00", "")] = stripNUL(e)
		}
		return out
	}
	return v
}

// finishedMax bounds the pilot's set of finished jobs; past it the set is
// emptied, which only costs River's completer a statement that changes
// nothing.
const finishedMax = 100_000

// markFinished records jobs completed by their workers' own transactions.
func (p *pilot) markFinished(ids []int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.finished)+len(ids) > finishedMax {
		clear(p.finished)
	}
	for _, id := range ids {
		p.finished[id] = struct{}{}
	}
}
