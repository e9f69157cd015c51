package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/braidflow/braid/scheduler"
)

// RecurringJob is a recurring job (one durable row per kind and entity
// key, scheduler.Recurring) as the API shows it, with whether it is a dead
// letter, whether a run is in progress, and the state of the River job of
// its current or last run.
type RecurringJob struct {
	*scheduler.Recurring
	// Dead is true while the job is parked as a dead letter (see dead_at);
	// revive brings it back.
	Dead bool `json:"dead"`
	// Running is true while a run is claimed (see running_since).
	Running bool `json:"running"`
	// JobState is the River state of job_id, or "" when that job is gone.
	JobState string `json:"job_state,omitempty"`
}

func (s *Server) routeRecurring() {
	const base = "/api/admin/recurring"
	s.add(&route{
		Method: "GET", Path: base, Tag: "recurring",
		Summary: "List recurring jobs in (kind, key) order",
		Query: append([]Param{
			{Name: "kind", Type: "string", Description: "only jobs of this kind"},
			{Name: "enabled", Type: "boolean", Description: "only enabled (true) or disabled (false) jobs"},
			{Name: "dead", Type: "boolean", Description: "only dead letters (true) or live jobs (false)"},
		}, pagingParams...),
		Response: List[RecurringJob]{},
		Handle:   s.listRecurring,
	})
	s.add(&route{
		Method: "GET", Path: base + "/{kind}/{key}", Tag: "recurring",
		Summary:  "A recurring job by kind and entity key (both URL-escaped)",
		Response: RecurringJob{},
		Handle: func(w http.ResponseWriter, r *http.Request) error {
			kind, key, err := recurringRef(r)
			if err != nil {
				return err
			}
			rj, err := s.sched.GetRecurring(r.Context(), kind, key)
			if err != nil {
				return recurringErr(err)
			}
			return s.writeRecurring(w, r, rj)
		},
	})
	actions := []struct {
		name, summary string
		do            func(ctx context.Context, kind, key string) (*scheduler.Recurring, error)
	}{
		{"enable", "Enable a recurring job; it runs at its kept next_run_at, or at once if that has passed. A dead-lettered job stays dead until it is revived", s.sched.Enable},
		{"disable", "Disable a recurring job; a run in progress finishes, and the job is not claimed again", s.sched.Disable},
		{"revive", "Revive a recurring job from the dead letters: its failures reset and it is due now; a disabled one runs once it is enabled", s.sched.Revive},
	}
	for _, a := range actions {
		s.add(&route{
			Method: "POST", Path: base + "/{kind}/{key}/" + a.name, Tag: "recurring", Mutates: true,
			Summary:  a.summary,
			Response: RecurringJob{},
			Handle: func(w http.ResponseWriter, r *http.Request) error {
				kind, key, err := recurringRef(r)
				if err != nil {
					return err
				}
				rj, err := a.do(r.Context(), kind, key)
				if err != nil {
					return recurringErr(err)
				}
				s.audit(r, "recurring."+a.name, kind, key, rj.ID)
				return s.writeRecurring(w, r, rj)
			},
		})
	}
}

// recurringRef reads the kind and key of the path. Neither can hold a NUL
// character or invalid UTF-8, which no row can have.
func recurringRef(r *http.Request) (kind, key string, err error) {
	kind, key = r.PathValue("kind"), r.PathValue("key")
	for _, v := range []string{kind, key} {
		if !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
			return "", "", errorf(http.StatusBadRequest, "invalid recurring job %q/%q: kind and key are UTF-8 text without NUL", kind, key)
		}
	}
	return kind, key, nil
}

// recurringErr maps the scheduler's errors about recurring jobs.
func recurringErr(err error) error {
	if errors.Is(err, scheduler.ErrRecurringNotFound) {
		return errorf(http.StatusNotFound, "%s", strings.TrimPrefix(err.Error(), "scheduler: "))
	}
	return err
}

func (s *Server) writeRecurring(w http.ResponseWriter, r *http.Request, rj *scheduler.Recurring) error {
	items, err := s.recurringJobs(r.Context(), []*scheduler.Recurring{rj})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, items[0])
	return nil
}

// recurringJobs shows recurring rows, with the state of their River jobs.
func (s *Server) recurringJobs(ctx context.Context, rows []*scheduler.Recurring) ([]RecurringJob, error) {
	var ids []int64
	for _, rj := range rows {
		if rj.JobID != nil {
			ids = append(ids, *rj.JobID)
		}
	}
	states := map[int64]string{}
	if len(ids) > 0 {
		res, err := s.pool.Query(ctx, `SELECT id, state::text FROM river_job WHERE id = ANY($1)`, ids)
		if err != nil {
			return nil, fmt.Errorf("reading the jobs of recurring jobs: %w", err)
		}
		var (
			id    int64
			state string
		)
		if _, err := pgx.ForEachRow(res, []any{&id, &state}, func() error { states[id] = state; return nil }); err != nil {
			return nil, fmt.Errorf("reading the jobs of recurring jobs: %w", err)
		}
	}
	out := make([]RecurringJob, len(rows))
	for i, rj := range rows {
		out[i] = RecurringJob{Recurring: rj, Dead: rj.DeadAt != nil, Running: rj.RunningSince != nil}
		if rj.JobID != nil {
			out[i].JobState = states[*rj.JobID]
		}
	}
	return out, nil
}

func (s *Server) listRecurring(w http.ResponseWriter, r *http.Request) error {
	page, err := paging(r)
	if err != nil {
		return err
	}
	enabled, err := schedBoolParam(r, "enabled")
	if err != nil {
		return err
	}
	dead, err := schedBoolParam(r, "dead")
	if err != nil {
		return err
	}
	kind := r.URL.Query().Get("kind")
	if !utf8.ValidString(kind) || strings.ContainsRune(kind, 0) || utf8.RuneCountInString(kind) > scheduler.KindMaxLength {
		return errorf(http.StatusBadRequest, "invalid kind filter: a kind is at most %d characters of UTF-8 without NUL", scheduler.KindMaxLength)
	}
	p := &scheduler.RecurringListParams{Kind: kind, Enabled: enabled, Dead: dead, Limit: page.Limit, Offset: page.Offset}
	list, err := s.sched.ListRecurring(r.Context(), p)
	if err != nil {
		return err
	}
	var total int64
	if err := s.pool.QueryRow(r.Context(), `SELECT count(*) FROM braid_recurring
WHERE ($1 = '' OR kind = $1)
  AND ($2::boolean IS NULL OR enabled = $2)
  AND ($3::boolean IS NULL OR (dead_at IS NOT NULL) = $3)`, kind, enabled, dead).Scan(&total); err != nil {
		return fmt.Errorf("counting recurring jobs: %w", err)
	}
	items, err := s.recurringJobs(r.Context(), list)
	if err != nil {
		return err
	}
	out := newList(items, page)
	out.Total = &total
	writeJSON(w, http.StatusOK, out)
	return nil
}
