-- A fixed picture of a braid database for the CLI's golden files: runs with
-- their tasks and steps, jobs in every state, schedules, recurring jobs and
-- leases. Every ID and time is fixed, so the output never changes.

INSERT INTO braid_runs (id, workflow, status, input, output, error, idempotency_key, trace_parent, created_at, started_at, finished_at) VALUES
('0195a1b2-0000-7000-8000-000000000001', 'digest', 'failed', '{"user": "ada", "entries": [101, 102]}', NULL,
 '{"message": "step \"send\" failed after 3 attempts: smtp: 550 mailbox unavailable"}', 'digest:ada:2026-03-02',
 '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
 '2026-03-02 09:00:00+00', '2026-03-02 09:00:01+00', '2026-03-02 09:12:30+00'),
('0195a1b2-0000-7000-8000-000000000002', 'digest', 'completed', '{"user": "grace", "entries": [101]}', '{"sent": 1}', NULL, NULL,
 '00-5b8aa5a2d2c872e8321cf37308d69df2-051581bf3cb55c13-01',
 '2026-03-02 08:00:00+00', '2026-03-02 08:00:01+00', '2026-03-02 08:10:05.5+00'),
('0195a1b2-0000-7000-8000-000000000003', 'report', 'waiting', '{"period": "day"}', NULL, NULL, NULL, NULL,
 '2026-03-02 09:30:00+00', '2026-03-02 09:30:00.5+00', NULL),
('0195a1b2-0000-7000-8000-000000000004', 'report', 'pending', '{"period": "week"}', NULL, NULL, NULL, NULL,
 '2026-03-02 09:45:00+00', NULL, NULL),
('0195a1b2-0000-7000-8000-000000000005', 'import', 'failed', '{"file": "orders.csv"}', NULL,
 '{"message": "step \"parse\" failed after 1 attempts: panic: runtime error: index out of range [3] with length 3\ngoroutine 42 [running]:\nruntime/debug.Stack()\n\t/usr/local/go/src/runtime/debug/stack.go:26 +0x5e\ngithub.com/braidflow/braid/workflow.runStep.func1()\n\t/src/braid/workflow/step.go:164 +0x7a\npanic({0x9a1c40?, 0xc0001b2018?})\n\t/usr/local/go/src/runtime/panic.go:792 +0x132\nexample.com/importer.parseRow(...)\n\t/src/importer/parse.go:17\nexample.com/importer.parse({0xc0002a4000, 0x3, 0x3})\n\t/src/importer/parse.go:9 +0x1d"}', NULL, NULL,
 '2026-03-02 09:50:00+00', '2026-03-02 09:50:00.5+00', '2026-03-02 09:50:02+00');

INSERT INTO braid_tasks (id, run_id, parent_task_id, key, workflow, status, input, output, error, attempt, turns, remaining, created_at, started_at, finished_at) VALUES
-- The failed digest: a root that fanned out to two children, waited out a
-- delay, and failed sending.
('0195a1b2-1000-7000-8000-000000000001', '0195a1b2-0000-7000-8000-000000000001', NULL, 'root', 'digest', 'failed',
 '{"user": "ada", "entries": [101, 102]}', NULL,
 '{"message": "step \"send\" failed after 3 attempts: smtp: 550 mailbox unavailable"}', 3, 4, 0,
 '2026-03-02 09:00:00+00', '2026-03-02 09:00:01+00', '2026-03-02 09:12:30+00'),
('0195a1b2-1000-7000-8000-000000000002', '0195a1b2-0000-7000-8000-000000000001', '0195a1b2-1000-7000-8000-000000000001', 'fetch/0', 'fetch_article', 'completed',
 '{"entry": 101}', '{"title": "Durable timers"}', NULL, 1, 1, 0,
 '2026-03-02 09:00:02+00', '2026-03-02 09:00:02.1+00', '2026-03-02 09:00:03.35+00'),
('0195a1b2-1000-7000-8000-000000000003', '0195a1b2-0000-7000-8000-000000000001', '0195a1b2-1000-7000-8000-000000000001', 'fetch/1', 'fetch_article', 'completed',
 '{"entry": 102}', '{"title": "Fencing tokens"}', NULL, 2, 2, 0,
 '2026-03-02 09:00:02+00', '2026-03-02 09:00:02.15+00', '2026-03-02 09:00:09+00'),
-- The completed digest.
('0195a1b2-1000-7000-8000-000000000004', '0195a1b2-0000-7000-8000-000000000002', NULL, 'root', 'digest', 'completed',
 '{"user": "grace", "entries": [101]}', '{"sent": 1}', NULL, 1, 3, 0,
 '2026-03-02 08:00:00+00', '2026-03-02 08:00:01+00', '2026-03-02 08:10:05.5+00'),
-- The waiting report: a delay until midnight.
('0195a1b2-1000-7000-8000-000000000005', '0195a1b2-0000-7000-8000-000000000003', NULL, 'root', 'report', 'waiting',
 '{"period": "day"}', NULL, NULL, 1, 1, 0,
 '2026-03-02 09:30:00+00', '2026-03-02 09:30:00.5+00', NULL),
-- The pending report.
('0195a1b2-1000-7000-8000-000000000006', '0195a1b2-0000-7000-8000-000000000004', NULL, 'root', 'report', 'pending',
 '{"period": "week"}', NULL, NULL, 0, 0, 0,
 '2026-03-02 09:45:00+00', NULL, NULL),
-- The failed import: its step panicked, and the stack is in the error.
('0195a1b2-1000-7000-8000-000000000007', '0195a1b2-0000-7000-8000-000000000005', NULL, 'root', 'import', 'failed',
 '{"file": "orders.csv"}', NULL, '{"message": "step \"parse\" failed after 1 attempts: panic: runtime error: index out of range [3] with length 3\ngoroutine 42 [running]:\nruntime/debug.Stack()\n\t/usr/local/go/src/runtime/debug/stack.go:26 +0x5e\ngithub.com/braidflow/braid/workflow.runStep.func1()\n\t/src/braid/workflow/step.go:164 +0x7a\npanic({0x9a1c40?, 0xc0001b2018?})\n\t/usr/local/go/src/runtime/panic.go:792 +0x132\nexample.com/importer.parseRow(...)\n\t/src/importer/parse.go:17\nexample.com/importer.parse({0xc0002a4000, 0x3, 0x3})\n\t/src/importer/parse.go:9 +0x1d"}', 1, 1, 0,
 '2026-03-02 09:50:00+00', '2026-03-02 09:50:00.5+00', '2026-03-02 09:50:02+00');

INSERT INTO braid_steps (task_id, name, kind, status, output, error, attempts, resume_at, started_at, created_at, finished_at) VALUES
('0195a1b2-1000-7000-8000-000000000001', 'load', 'step', 'completed', '{"entries": 2}', NULL, 1, NULL,
 '2026-03-02 09:00:01+00', '2026-03-02 09:00:01.25+00', '2026-03-02 09:00:01.25+00'),
('0195a1b2-1000-7000-8000-000000000001', 'window', 'delay', 'fired', NULL, NULL, 1, '2026-03-02 09:10:09+00',
 NULL, '2026-03-02 09:00:09.1+00', '2026-03-02 09:10:09.2+00'),
('0195a1b2-1000-7000-8000-000000000001', 'send', 'step', 'failed', NULL, '{"message": "smtp: 550 mailbox unavailable"}', 3, NULL,
 '2026-03-02 09:10:10+00', '2026-03-02 09:12:30+00', '2026-03-02 09:12:30+00'),
('0195a1b2-1000-7000-8000-000000000002', 'get', 'step', 'completed', '{"status": 200}', NULL, 1, NULL,
 '2026-03-02 09:00:02.2+00', '2026-03-02 09:00:03.3+00', '2026-03-02 09:00:03.3+00'),
('0195a1b2-1000-7000-8000-000000000003', 'get', 'step', 'completed', '{"status": 200}', NULL, 2, NULL,
 '2026-03-02 09:00:02.2+00', '2026-03-02 09:00:08.9+00', '2026-03-02 09:00:08.9+00'),
('0195a1b2-1000-7000-8000-000000000004', 'send', 'step', 'completed', '{"sent": 1}', NULL, 1, NULL,
 '2026-03-02 08:10:05+00', '2026-03-02 08:10:05.4+00', '2026-03-02 08:10:05.4+00'),
('0195a1b2-1000-7000-8000-000000000005', 'build', 'step', 'completed', '{"rows": 1200}', NULL, 1, NULL,
 '2026-03-02 09:30:00.5+00', '2026-03-02 09:30:02+00', '2026-03-02 09:30:02+00'),
('0195a1b2-1000-7000-8000-000000000005', 'until-midnight', 'delay', 'waiting', NULL, NULL, 1, '2026-03-03 00:00:00+00',
 NULL, '2026-03-02 09:30:02+00', NULL),
('0195a1b2-1000-7000-8000-000000000007', 'read', 'step', 'completed', '{"rows": 3}', NULL, 1, NULL,
 '2026-03-02 09:50:00.6+00', '2026-03-02 09:50:01+00', '2026-03-02 09:50:01+00'),
('0195a1b2-1000-7000-8000-000000000007', 'parse', 'step', 'failed', NULL, '{"message": "panic: runtime error: index out of range [3] with length 3\ngoroutine 42 [running]:\nruntime/debug.Stack()\n\t/usr/local/go/src/runtime/debug/stack.go:26 +0x5e\ngithub.com/braidflow/braid/workflow.runStep.func1()\n\t/src/braid/workflow/step.go:164 +0x7a\npanic({0x9a1c40?, 0xc0001b2018?})\n\t/usr/local/go/src/runtime/panic.go:792 +0x132\nexample.com/importer.parseRow(...)\n\t/src/importer/parse.go:17\nexample.com/importer.parse({0xc0002a4000, 0x3, 0x3})\n\t/src/importer/parse.go:9 +0x1d"}', 1, NULL,
 '2026-03-02 09:50:01+00', '2026-03-02 09:50:02+00', '2026-03-02 09:50:02+00');

INSERT INTO river_job (id, state, attempt, max_attempts, attempted_at, created_at, finalized_at, scheduled_at, priority, args, kind, queue, errors) VALUES
(1, 'completed', 1, 25, '2026-03-02 09:00:01+00', '2026-03-02 09:00:00+00', '2026-03-02 09:00:02+00', '2026-03-02 09:00:00+00', 3,
 '{"to": "ada@example.com"}', 'send_email', 'default', NULL),
(2, 'available', 0, 25, NULL, '2026-03-02 09:05:00+00', NULL, '2026-03-02 09:05:00+00', 2,
 '{"to": "grace@example.com"}', 'send_email', 'default', NULL),
(3, 'running', 1, 1, '2026-03-02 09:06:00+00', '2026-03-02 09:06:00+00', NULL, '2026-03-02 09:06:00+00', 3,
 '{"feed_id": 5}', 'fetch_feed', 'feeds', NULL),
(4, 'retryable', 2, 5, '2026-03-02 09:08:00+00', '2026-03-02 09:07:00+00', NULL, '2026-03-02 09:20:00+00', 3,
 '{"user": "ada"}', 'sync_calendar', 'default', ARRAY[
   '{"at": "2026-03-02T09:07:01Z", "attempt": 1, "error": "GET https://calendar.example.com/ada.ics: 503 Service Unavailable", "trace": ""}'::jsonb,
   '{"at": "2026-03-02T09:08:01Z", "attempt": 2, "error": "GET https://calendar.example.com/ada.ics: 503 Service Unavailable", "trace": ""}'::jsonb]),
(5, 'scheduled', 0, 3, NULL, '2026-03-02 09:00:00+00', NULL, '2026-03-02 12:00:00+00', 4,
 '{"image": "cover.png"}', 'resize_image', 'media', NULL),
(6, 'discarded', 3, 3, '2026-03-02 09:02:59+00', '2026-03-02 09:00:00+00', '2026-03-02 09:03:00+00', '2026-03-02 09:02:59+00', 3,
 '{"image": "broken.tiff"}', 'resize_image', 'media', ARRAY[
   '{"at": "2026-03-02T09:00:01Z", "attempt": 1, "error": "image: unknown format", "trace": ""}'::jsonb,
   '{"at": "2026-03-02T09:01:01Z", "attempt": 2, "error": "image: unknown format", "trace": ""}'::jsonb,
   '{"at": "2026-03-02T09:03:00Z", "attempt": 3, "error": "image: unknown format", "trace": ""}'::jsonb]),
(7, 'discarded', 25, 25, '2026-03-02 08:49:59+00', '2026-03-01 08:00:00+00', '2026-03-02 08:50:00+00', '2026-03-02 08:49:59+00', 3,
 '{"to": "nobody@example.invalid"}', 'send_email', 'default', ARRAY[
   '{"at": "2026-03-02T08:50:00Z", "attempt": 25, "error": "smtp: 550 mailbox unavailable", "trace": ""}'::jsonb]),
(8, 'cancelled', 1, 25, '2026-03-02 08:39:00+00', '2026-03-02 08:38:00+00', '2026-03-02 08:40:00+00', '2026-03-02 08:38:00+00', 3,
 '{"to": "linus@example.com"}', 'send_email', 'default', NULL);
-- A dead turn job: the turn of the failed import's root, whose worker
-- crashed on every attempt.
INSERT INTO river_job (id, state, attempt, max_attempts, attempted_at, created_at, finalized_at, scheduled_at, priority, args, kind, queue, errors) VALUES
(9, 'discarded', 2, 2, '2026-03-02 09:50:01+00', '2026-03-02 09:50:00+00', '2026-03-02 09:50:02+00', '2026-03-02 09:50:01+00', 3,
 '{"task_id": "0195a1b2-1000-7000-8000-000000000007", "workflow": "import"}', 'braid_task', 'default', ARRAY[
   '{"at": "2026-03-02T09:50:00.5Z", "attempt": 1, "error": "turn: pool closed", "trace": ""}'::jsonb,
   '{"at": "2026-03-02T09:50:02Z", "attempt": 2, "error": "PanicError: runtime error: index out of range [3] with length 3", "trace": "goroutine 42 [running]:\nruntime/debug.Stack()\n\t/usr/local/go/src/runtime/debug/stack.go:26 +0x5e\ngithub.com/braidflow/braid/workflow.runStep.func1()\n\t/src/braid/workflow/step.go:164 +0x7a\npanic({0x9a1c40?, 0xc0001b2018?})\n\t/usr/local/go/src/runtime/panic.go:792 +0x132\nexample.com/importer.parseRow(...)\n\t/src/importer/parse.go:17\nexample.com/importer.parse({0xc0002a4000, 0x3, 0x3})\n\t/src/importer/parse.go:9 +0x1d"}'::jsonb]);
SELECT setval(pg_get_serial_sequence('river_job', 'id'), 100);

-- The running feed fetch has reported progress.
INSERT INTO braid_job_progress (job_id, kind, attempt, percent, message, heartbeat_at, updated_at) VALUES
(3, 'fetch_feed', 1, 40, 'fetched 4 of 10 entries', '2026-03-02 09:06:30+00', '2026-03-02 09:06:30+00');

INSERT INTO braid_schedules (name, description, expression, time_zone, target_type, target, args, queue, priority, max_attempts, enabled,
                             overlap_policy, catch_up_policy, next_run_at, last_run_at, last_job_id, last_run_id, created_by, created_at, updated_at) VALUES
('cleanup', 'Purge expired sessions', '@every 15m', 'UTC', 'job', 'cleanup', '{}', 'maintenance', 4, NULL, false,
 'allow', 'skip', '2026-03-02 09:15:00+00', NULL, NULL, NULL, 'ops', '2026-02-01 10:00:00+00', '2026-02-20 10:00:00+00'),
('nightly-report', 'The day''s report, after midnight in Berlin', '0 2 * * *', 'Europe/Berlin', 'workflow', 'report', '{"period": "day"}', 'default', 3, NULL, true,
 'skip', 'once', '2026-03-03 01:00:00+00', '2026-03-02 01:00:00.2+00', NULL, '0195a1b2-0000-7000-8000-000000000003', 'ada', '2026-02-01 10:00:00+00', '2026-02-01 10:00:00+00'),
('renew_websub', 'Renew WebSub subscriptions that expire within a day', '@daily', 'UTC', 'job', 'renew_websub', '{}', 'default', 3, 5, true,
 'skip', 'once', '2026-03-03 00:00:00+00', '2026-03-02 00:00:00.1+00', 1, NULL, 'feedfetcher', '2026-02-01 10:00:00+00', '2026-02-01 10:00:00+00');

-- Today's slot of renew_websub has failed six times in a row: it stays due
-- (next_run_at is the slot) and is held back until retry_at.
UPDATE braid_schedules SET next_run_at = '2026-03-02 00:00:00+00', last_run_at = '2026-03-01 00:00:00.1+00',
    last_error = 'inserting job of kind "renew_websub": ERROR: deadlock detected (SQLSTATE 40P01): '
        || 'Process 4121 waits for ShareLock on transaction 7712; blocked by process 977.',
    last_error_at = '2026-03-02 08:59:30+00', fire_failures = 6, retry_at = '2026-03-02 09:00:30+00'
WHERE name = 'renew_websub';

INSERT INTO braid_recurring (kind, key, args, queue, priority, enabled, next_run_at, running_since, job_id, last_run_at, last_error, consecutive_failures, dead_at, created_at, updated_at) VALUES
('fetch_feed', 'feed:1', '{"feed_id": 1}', 'feeds', 3, true, '2026-03-02 09:30:00+00', NULL, NULL, '2026-03-02 09:00:05+00', NULL, 0, NULL,
 '2026-02-01 10:00:00+00', '2026-03-02 09:00:05+00'),
('fetch_feed', 'feed:2', '{"feed_id": 2}', 'feeds', 3, true, '2026-03-02 09:20:00+00', NULL, NULL, '2026-03-02 09:08:01+00',
 'GET https://feeds.example.com/flaky.xml: 503 Service Unavailable', 3, NULL, '2026-02-01 10:00:00+00', '2026-03-02 09:08:01+00'),
('fetch_feed', 'feed:3', '{"feed_id": 3}', 'feeds', 3, false, '2026-03-02 10:00:00+00', NULL, NULL, '2026-03-02 08:00:00+00', NULL, 0, NULL,
 '2026-02-01 10:00:00+00', '2026-03-02 08:30:00+00'),
('fetch_feed', 'feed:4', '{"feed_id": 4}', 'feeds', 3, true, '2026-03-02 09:45:00+00', NULL, NULL, '2026-03-02 08:45:00+00',
 'parse: XML syntax error on line 1: unexpected EOF', 10, '2026-03-02 08:45:00+00', '2026-02-01 10:00:00+00', '2026-03-02 08:45:00+00'),
('fetch_feed', 'feed:5', '{"feed_id": 5}', 'feeds', 3, true, '2026-03-02 09:06:00+00', '2026-03-02 09:06:00+00', 3, '2026-03-02 08:06:00+00', NULL, 0, NULL,
 '2026-02-01 10:00:00+00', '2026-03-02 09:06:00+00'),
('renew_websub', 'hub.example.com', '{"hub": "https://hub.example.com/"}', 'default', 3, true, '2026-03-03 00:00:00+00', NULL, NULL, NULL, NULL, 0, NULL,
 '2026-02-01 10:00:00+00', '2026-02-01 10:00:00+00');

INSERT INTO braid_leases (name, holder, generation, acquired_at, renewed_at, expires_at) VALUES
('braid:delays', 'api-7f9c4:4121', 3, '2026-03-02 08:00:00+00', '2026-03-02 09:00:00+00', '2100-01-01 00:00:00+00'),
('braid:maintenance', 'api-7f9c4:4121', 12, '2026-03-02 07:00:00+00', '2026-03-02 09:00:00+00', '2100-01-01 00:00:00+00'),
('braid:scheduler', 'worker-2b1d:977', 7, '2026-03-01 22:00:00+00', '2026-03-02 08:59:45+00', '2026-03-02 09:00:15+00');
