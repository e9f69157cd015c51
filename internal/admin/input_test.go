package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/queue"
	"github.com/braidflow/braid/scheduler"
	"github.com/braidflow/braid/workflow"
)

// fingerprint digests every row of every table in the database's public
// schema, so a test can show that a request changed nothing.
func fingerprint(t *testing.T, pool *pgxpool.Pool) map[string]string {
	t.Helper()
	ctx := context.Background()
	rows, err := pool.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, name)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, name := range tables {
		var digest string
		q := `SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) FROM ` + `public.` + quoteIdent(name) + ` t`
		if err := pool.QueryRow(ctx, q).Scan(&digest); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out[name] = digest
	}
	return out
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// seedRows gives the database a run, a job, a schedule and a recurring job
// for malformed requests to aim at.
func seedRows(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	wf := workflow.Define("input_probe", func(t *workflow.Task, in string) (string, error) { return in, nil })
	eng, err := workflow.NewEngine(pool, &workflow.Config{Workflows: []workflow.Definition{wf}, DisableDelayProcessor: true, Queue: &queue.Config{MaintenanceDisabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Stop(context.Background()) })
	if _, err := wf.Start(ctx, eng, "x", nil); err != nil {
		t.Fatal(err)
	}
	sched, err := scheduler.New(pool, &scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sched.Create(ctx, &scheduler.ScheduleParams{Name: "nightly", Expression: "@daily", TargetType: scheduler.TargetJob, Target: "probe_job", Args: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := sched.Ensure(ctx, "probe_feed", "feed-1", map[string]int{"id": 1}, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
}

// Hostile values for path IDs and filters.
var hostile = []string{
	"999999999",
	"00000000-0000-0000-0000-000000000000",
	"-1",
	"0",
	"'; DROP TABLE braid_runs; --",
	`" OR 1=1 --`,
	"%00",
	"\x00",
	"a\xffb",
	strings.Repeat("9", 40),
}

func TestMalformedInputGetsA4xxAndChangesNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	seedRows(t, f.pool)
	before := fingerprint(t, f.pool)

	bodies := []struct {
		name string
		body string
	}{
		{"truncated", `{"status": "av`},
		{"not an object", `[1, 2, 3]`},
		{"a string", `"hello"`},
		{"unknown field", `{"no_such_field": true}`},
		{"two values", `{} {}`},
		{"wrong type", `{"job_ids": "all", "status": 7, "priority": "x", "enabled": "yes", "name": 3}`},
		{"over 1 MiB", `{"args": "` + strings.Repeat("a", MaxBodyBytesDefault+1) + `"}`},
	}
	check := func(method, path, body string) {
		t.Helper()
		status, raw := f.do(method, path, adminSecret, body)
		if status < 400 || status >= 500 {
			// A route that takes no body may ignore it; then the
			// unknown ID must still be a 4xx.
			t.Errorf("%s %s with %.40q: %d, want a 4xx; %s", method, path, body, status, clipBytes(raw))
			return
		}
		var e errorBody
		if err := json.Unmarshal(raw, &e); err != nil || e.Error == nil || e.Error.Message == "" {
			t.Errorf("%s %s: %d body is not a JSON error: %s", method, path, status, clipBytes(raw))
		}
		if len(body) > MaxBodyBytesDefault && status != http.StatusRequestEntityTooLarge {
			t.Errorf("%s %s with a body over the limit: %d, want 413", method, path, status)
		}
	}
	for _, rt := range f.srv.routes {
		if !rt.Mutates {
			continue
		}
		for _, id := range hostile {
			path := pathParam.ReplaceAllString(rt.Path, url.PathEscape(id))
			for _, b := range bodies {
				check(rt.Method, path, b.body)
			}
		}
	}
	// Lists: bad paging, and SQL in every filter.
	for _, rt := range f.srv.routes {
		if rt.Method != "GET" || strings.Contains(rt.Path, "{") || rt.Path == "/api/events" {
			continue
		}
		for _, q := range []string{"limit=-1", "limit=0", "limit=1000000", "limit=abc", "offset=-5", "offset=x"} {
			hasPaging := false
			for _, p := range rt.Query {
				hasPaging = hasPaging || p.Name == "limit"
			}
			if !hasPaging {
				continue
			}
			status, raw := f.do("GET", rt.Path+"?"+q, adminSecret, nil)
			if status != http.StatusBadRequest {
				t.Errorf("GET %s?%s: %d, want 400; %s", rt.Path, q, status, clipBytes(raw))
			}
		}
		for _, p := range rt.Query {
			if p.Name == "limit" || p.Name == "offset" {
				continue
			}
			for _, v := range hostile {
				path := rt.Path + "?" + url.Values{p.Name: {v}}.Encode()
				status, raw := f.do("GET", path, adminSecret, nil)
				if status >= 500 {
					t.Errorf("GET %s: %d; %s", path, status, clipBytes(raw))
				}
			}
		}
	}
	// Reads of unknown IDs.
	for _, rt := range f.srv.routes {
		if rt.Method != "GET" || !strings.Contains(rt.Path, "{") {
			continue
		}
		for _, id := range hostile {
			path := pathParam.ReplaceAllString(rt.Path, url.PathEscape(id))
			status, raw := f.do("GET", path, adminSecret, nil)
			if status < 400 || status >= 500 {
				t.Errorf("GET %s: %d, want a 4xx; %s", path, status, clipBytes(raw))
			}
		}
	}
	after := fingerprint(t, f.pool)
	for table, digest := range before {
		if after[table] != digest {
			t.Errorf("table %s changed under malformed requests", table)
		}
	}
	if strings.Contains(f.auditLog(), `"admin: audit"`) {
		t.Errorf("a refused mutation was audited")
	}
}

func clipBytes(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}

// FuzzDecode feeds the body decoder arbitrary bytes: it either fills the
// value or returns a 4xx error, and never panics.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1}`, `{`, `[]`, `null`, `{"a":1} x`, "", `{"a":"\u0000"}`, `{"job_ids":[1,2,3],"status":"available"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, _ := http.NewRequest("POST", "/", strings.NewReader(string(body)))
		req.Body = http.MaxBytesReader(nil, req.Body, 1<<10)
		var v struct {
			JobIDs []int64 `json:"job_ids"`
			Status string  `json:"status"`
			A      any     `json:"a"`
		}
		err := decode(req, &v)
		if err == nil {
			return
		}
		ae, ok := err.(*apiError)
		if !ok || ae.body.Status < 400 || ae.body.Status >= 500 || ae.body.Message == "" {
			t.Fatalf("decode(%q): %v, want a 4xx apiError", body, err)
		}
	})
}

// A value over what River stores is the client's mistake: a 4xx naming the
// limit (422 for a schedule's out-of-range value, 400 for dispatch's
// options), never a 500 from the database.
func TestMaxAttemptsOverRiversLimitIsA400(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	before := fingerprint(t, f.pool)
	for _, tc := range []struct {
		path, body string
		want       int
	}{
		{"/api/admin/scheduled-jobs", `{"name": "big", "cron_expression": "@daily", "kind": "probe_job", "max_attempts": 3000000000}`, http.StatusUnprocessableEntity},
		{"/api/admin/scheduled-jobs", `{"name": "big", "cron_expression": "@daily", "kind": "probe_job", "max_attempts": 40000}`, http.StatusUnprocessableEntity},
		{"/api/admin/dispatch/job", `{"kind": "probe_job", "force": true, "max_attempts": 40000}`, http.StatusBadRequest},
	} {
		status, raw := f.do("POST", tc.path, adminSecret, tc.body)
		if status != tc.want || !strings.Contains(string(raw), "32767") {
			t.Errorf("POST %s %s: %d %s; want %d naming the limit 32767", tc.path, tc.body, status, raw, tc.want)
		}
	}
	after := fingerprint(t, f.pool)
	for table, digest := range before {
		if after[table] != digest {
			t.Errorf("table %s changed", table)
		}
	}
}

// River's table refuses a job kind of 128 characters or more, which the
// API's own check of names (200) let through: a dispatch or a schedule of
// such a kind is a 4xx that names River's limit, and changes nothing.
func TestJobKindOverRiversLimit(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	seedRows(t, f.pool)
	before := fingerprint(t, f.pool)
	kind := strings.Repeat("k", 150)
	for _, tc := range []struct{ method, path, body string }{
		{"POST", "/api/admin/dispatch/job", `{"kind": "` + kind + `", "force": true}`},
		{"POST", "/api/admin/scheduled-jobs", `{"name": "long_kind", "cron_expression": "@daily", "kind": "` + kind + `"}`},
		{"PUT", "/api/admin/scheduled-jobs/nightly", `{"kind": "` + kind + `"}`},
	} {
		status, raw := f.do(tc.method, tc.path, adminSecret, tc.body)
		var e errorBody
		_ = json.Unmarshal(raw, &e)
		if status < 400 || status >= 500 || e.Error == nil || !strings.Contains(e.Error.Message, "150 characters; River's limit for a job kind is 127") {
			t.Errorf("%s %s with a kind of 150 characters: %d %s; want a 4xx naming the limit", tc.method, tc.path, status, raw)
		}
	}
	after := fingerprint(t, f.pool)
	for table, digest := range before {
		if after[table] != digest {
			t.Errorf("table %s changed", table)
		}
	}
}
