-- A fixed DAG run for the golden files, as the engine stores one: the root
-- task of the DAG "ingest" and a task per node, each naming its dependents.
-- A false condition skipped translate; load failed, which failed the DAG and
-- skipped report; the on-failure node alert ran.
--
--   extract → clean ─────┐
--          └→ translate ─┴→ load → report        alert: if the DAG fails

INSERT INTO braid_runs (id, workflow, status, input, output, error, idempotency_key, trace_parent, created_at, started_at, finished_at) VALUES
('0195a1b2-0000-7000-8000-000000000010', 'ingest', 'failed', '{"file": "orders.csv", "lang": "en"}', NULL,
 '{"child": "load", "attempt": 1, "message": "DAG \"ingest\": node \"load\" (workflow \"load_rows\") failed: copy into warehouse: connection reset by peer"}',
 NULL, '00-7d1c2b3a4f5e6d7c8b9a0f1e2d3c4b5a-1a2b3c4d5e6f7a8b-01',
 '2026-03-02 10:00:00+00', '2026-03-02 10:00:00+00', '2026-03-02 10:00:09+00');

INSERT INTO braid_tasks (id, run_id, parent_task_id, key, workflow, status, input, output, error, attempt, max_attempts, turns, remaining,
                         created_at, started_at, finished_at, dependents, skip_reason) VALUES
('0195a1b2-1000-7000-8000-000000000010', '0195a1b2-0000-7000-8000-000000000010', NULL, 'root', 'ingest', 'failed',
 '{"file": "orders.csv", "lang": "en"}', NULL,
 '{"child": "load", "attempt": 1, "message": "DAG \"ingest\": node \"load\" (workflow \"load_rows\") failed: copy into warehouse: connection reset by peer"}',
 1, 25, 1, 0, '2026-03-02 10:00:00+00', '2026-03-02 10:00:08.9+00', '2026-03-02 10:00:09+00', NULL, NULL),
('0195a1b2-1000-7000-8000-000000000011', '0195a1b2-0000-7000-8000-000000000010', '0195a1b2-1000-7000-8000-000000000010', 'extract', 'extract_rows', 'completed',
 '{"file": "orders.csv", "lang": "en"}', '{"rows": 1200}', NULL, 1, 25, 1, 0,
 '2026-03-02 10:00:00+00', '2026-03-02 10:00:00.1+00', '2026-03-02 10:00:02+00',
 '{0195a1b2-1000-7000-8000-000000000012,0195a1b2-1000-7000-8000-000000000013,0195a1b2-1000-7000-8000-000000000016}', NULL),
('0195a1b2-1000-7000-8000-000000000012', '0195a1b2-0000-7000-8000-000000000010', '0195a1b2-1000-7000-8000-000000000010', 'clean', 'clean_rows', 'completed',
 '{"file": "orders.csv", "lang": "en"}', '{"rows": 1180}', NULL, 1, 25, 1, 0,
 '2026-03-02 10:00:00+00', '2026-03-02 10:00:02.1+00', '2026-03-02 10:00:03.5+00',
 '{0195a1b2-1000-7000-8000-000000000014,0195a1b2-1000-7000-8000-000000000016}', NULL),
('0195a1b2-1000-7000-8000-000000000013', '0195a1b2-0000-7000-8000-000000000010', '0195a1b2-1000-7000-8000-000000000010', 'translate', 'translate_rows', 'skipped',
 '{"file": "orders.csv", "lang": "en"}', NULL, NULL, 0, 25, 0, 0,
 '2026-03-02 10:00:00+00', NULL, '2026-03-02 10:00:02+00',
 '{0195a1b2-1000-7000-8000-000000000014,0195a1b2-1000-7000-8000-000000000016}', 'condition false: input.lang != "en"'),
('0195a1b2-1000-7000-8000-000000000014', '0195a1b2-0000-7000-8000-000000000010', '0195a1b2-1000-7000-8000-000000000010', 'load', 'load_rows', 'failed',
 '{"file": "orders.csv", "lang": "en"}', NULL, '{"attempt": 1, "message": "copy into warehouse: connection reset by peer"}', 1, 1, 1, 0,
 '2026-03-02 10:00:00+00', '2026-03-02 10:00:03.6+00', '2026-03-02 10:00:07+00',
 '{0195a1b2-1000-7000-8000-000000000015,0195a1b2-1000-7000-8000-000000000016}', NULL),
('0195a1b2-1000-7000-8000-000000000015', '0195a1b2-0000-7000-8000-000000000010', '0195a1b2-1000-7000-8000-000000000010', 'report', 'send_report', 'skipped',
 '{"file": "orders.csv", "lang": "en"}', NULL, NULL, 0, 25, 0, 0,
 '2026-03-02 10:00:00+00', NULL, '2026-03-02 10:00:07+00',
 '{0195a1b2-1000-7000-8000-000000000016}', 'the DAG failed: node "load" failed'),
('0195a1b2-1000-7000-8000-000000000016', '0195a1b2-0000-7000-8000-000000000010', '0195a1b2-1000-7000-8000-000000000010', 'alert', 'page_on_call', 'completed',
 '{"file": "orders.csv", "lang": "en"}', '"paged"', NULL, 1, 25, 1, 0,
 '2026-03-02 10:00:00+00', '2026-03-02 10:00:07.1+00', '2026-03-02 10:00:08.8+00',
 '{}', NULL);

INSERT INTO braid_steps (task_id, name, kind, status, output, error, attempts, resume_at, started_at, created_at, finished_at) VALUES
('0195a1b2-1000-7000-8000-000000000011', 'read', 'step', 'completed', '{"rows": 1200}', NULL, 1, NULL,
 '2026-03-02 10:00:00.2+00', '2026-03-02 10:00:01.9+00', '2026-03-02 10:00:01.9+00');

-- alert is the DAG's on-failure node.
UPDATE braid_tasks SET on_failure = true WHERE id = '0195a1b2-1000-7000-8000-000000000016';
