// Runs: the filterable list, and a run's page with its task tree, its DAGs'
// nodes in layers, a Gantt timeline of turns, steps, waits and delays, its
// steps with their outputs and errors, and the Cancel and Retry actions.
"use strict";

(() => {
  const {h, api, fmt, status} = braid;
  const STATUSES = ["pending", "running", "waiting", "completed", "failed", "cancelled"];
  const UNFINISHED = ["pending", "running", "waiting"];

  // shortID shows the distinctive tail of a UUIDv7 (its head is a time).
  function shortID(id) {
    return id ? id.slice(-12) : "";
  }

  // localInput turns an ISO time into the value of a datetime-local input.
  function localInput(iso) {
    if (!iso) return "";
    const d = new Date(iso);
    if (isNaN(d)) return "";
    const p = (n) => String(n).padStart(2, "0");
    return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}`;
  }

  // isoFromInput turns a datetime-local value (local time) into RFC 3339.
  function isoFromInput(v) {
    if (!v) return "";
    const d = new Date(v);
    return isNaN(d) ? "" : d.toISOString();
  }

  function truncate(s, n) {
    if (!s) return "";
    const first = s.split("\n")[0];
    return first.length > n ? first.slice(0, n - 1) + "…" : first;
  }

  function jsonPre(v, cls) {
    if (v === null || v === undefined) return h("span", {class: "muted"}, "–");
    return h("pre", {class: cls || null}, fmt.json(v));
  }

  // ---- the list -----------------------------------------------------------

  braid.page("/runs", async (params, main, query) => {
    const f = {
      workflow: query.get("workflow") || "",
      status: query.get("status") || "",
      idempotency_key: query.get("idempotency_key") || "",
      created_after: query.get("created_after") || "",
      created_before: query.get("created_before") || "",
      limit: query.get("limit") || "50",
      offset: query.get("offset") || "0",
    };
    const go = (changes) => {
      location.hash = "#/runs" + braid.qs(Object.assign({}, f, {offset: "0"}, changes));
    };

    const inputs = {
      workflow: h("input", {name: "workflow", id: "runs-workflow", placeholder: "any workflow", value: f.workflow, size: 18}),
      status: h("select", {name: "status", id: "runs-status"},
        h("option", {value: ""}, "any status"),
        STATUSES.map(s => h("option", {value: s, selected: s === f.status}, s))),
      idempotency_key: h("input", {name: "idempotency_key", id: "runs-key", placeholder: "exact key", value: f.idempotency_key, size: 18}),
      created_after: h("input", {type: "datetime-local", name: "created_after", id: "runs-after", value: localInput(f.created_after)}),
      created_before: h("input", {type: "datetime-local", name: "created_before", id: "runs-before", value: localInput(f.created_before)}),
      limit: h("select", {name: "limit", id: "runs-limit"},
        ["25", "50", "100", "200", "500"].map(n => h("option", {value: n, selected: n === f.limit}, n + " per page"))),
    };
    const form = h("form", {class: "filters", id: "runs-filters", onsubmit: (e) => {
      e.preventDefault();
      go({
        workflow: inputs.workflow.value.trim(),
        status: inputs.status.value,
        idempotency_key: inputs.idempotency_key.value.trim(),
        created_after: isoFromInput(inputs.created_after.value),
        created_before: isoFromInput(inputs.created_before.value),
        limit: inputs.limit.value,
      });
    }},
      h("label", {}, "Workflow", inputs.workflow),
      h("label", {}, "Status", inputs.status),
      h("label", {}, "Idempotency key", inputs.idempotency_key),
      h("label", {}, "Created after", inputs.created_after),
      h("label", {}, "Created before", inputs.created_before),
      h("label", {}, "Page", inputs.limit),
      h("button", {type: "submit", class: "primary"}, "Filter"),
      h("button", {type: "button", onclick: () => { location.hash = "#/runs"; }}, "Clear"),
      h("span", {class: "muted", id: "runs-range"}, rangeHint(f)));

    const cards = h("div", {class: "cards", id: "runs-cards"});
    const summary = h("p", {class: "muted", id: "runs-total"});
    const body = h("div", {id: "runs-list"});
    main.append(h("h1", {}, "Runs"), cards, form, summary, body);

    async function refresh() {
      const [list, stats] = await Promise.all([
        api("GET", "/api/runs" + braid.qs(f)),
        api("GET", "/api/runs/stats").catch(() => null),
      ]);
      if (stats) renderCards(stats);
      summary.textContent = list.total === undefined ? "" :
        `${list.total} run${list.total === 1 ? "" : "s"} match` + (list.total === 1 ? "es" : "");
      const rows = list.items.map(r => ({
        attrs: {class: "run-row s-row-" + r.status, "data-run": r.id},
        cells: [
          h("a", {href: "#/runs/" + encodeURIComponent(r.id), class: "run-link", title: r.id}, h("code", {}, shortID(r.id))),
          h("a", {href: "#/runs" + braid.qs({workflow: r.workflow}), title: "only runs of " + r.workflow}, r.workflow),
          status(r.status),
          h("span", {title: fmt.time(r.created_at)}, fmt.ago(r.created_at)),
          r.started_at ? fmt.between(r.started_at, r.finished_at) : h("span", {class: "muted"}, "not started"),
          r.idempotency_key ? h("code", {}, r.idempotency_key) : "",
          r.error ? h("span", {class: "error", title: r.error}, truncate(r.error, 90)) : "",
        ],
      }));
      body.replaceChildren(
        braid.table(["Run", "Workflow", "Status", "Created", "Duration", "Idempotency key", "Error"], rows, {id: "runs-table"}),
        braid.pager(list, (offset) => { location.hash = "#/runs" + braid.qs(Object.assign({}, f, {offset: String(offset)})); }));
    }

    function renderCards(stats) {
      cards.replaceChildren(...STATUSES.map(s => {
        const n = stats.by_status[s] || 0;
        const card = h("a", {href: "#/runs" + braid.qs(Object.assign({}, f, {status: s === f.status ? "" : s, offset: "0"})),
          class: "card status-card" + (s === f.status ? " active" : ""), "data-status": s,
          title: s === f.status ? "show every status" : "only " + s + " runs"},
          h("div", {class: "n"}, String(n)), h("div", {class: "l"}, status(s)));
        card.style.textDecoration = "none";
        card.style.color = "inherit";
        if (s === f.status) card.style.borderColor = "var(--accent)";
        return card;
      }),
      h("div", {class: "card"}, h("div", {class: "n"}, String(stats.finished_last_hour)),
        h("div", {class: "l"}, "finished in the last hour, " + stats.failed_last_hour + " failed")));
    }

    await refresh();
    return {refresh};
  }, "runs");

  function rangeHint(f) {
    if (!f.created_after && !f.created_before) return "";
    return "created " + (f.created_after ? "from " + fmt.time(f.created_after) + " " : "") +
      (f.created_before ? "until " + fmt.time(f.created_before) : "");
  }

  // ---- a run ---------------------------------------------------------------

  braid.page("/runs/:id", async (params, main) => {
    const id = params.id;
    let last = null; // the detail on screen, as JSON
    const open = new Set(); // the <details> a person opened, by key

    const header = h("div", {id: "run-header"});
    const sections = h("div", {id: "run-body"});
    main.append(h("p", {}, h("a", {href: "#/runs"}, "← all runs")), header, sections);

    async function refresh() {
      let d;
      try {
        d = await api("GET", "/api/runs/" + encodeURIComponent(id));
      } catch (e) {
        if (e.status === 404 || e.status === 400) {
          header.replaceChildren(h("h1", {}, "Run not found"), h("p", {class: "error", id: "run-error"}, e.message));
          sections.replaceChildren();
          return;
        }
        throw e;
      }
      const json = JSON.stringify(d);
      // A finished run that has not changed keeps its page as it is, so
      // that scrolling and selections survive the ticks.
      if (json === last && !UNFINISHED.includes(d.run.status)) return;
      last = json;
      sections.querySelectorAll("details[data-key]").forEach(el => {
        if (el.open) open.add(el.dataset.key); else open.delete(el.dataset.key);
      });
      header.replaceChildren(h("div", {}, renderHeader(d)));
      sections.replaceChildren(h("div", {}, renderBody(d, open)));
    }

    await refresh();
    return {refresh};
  }, "runs");

  function renderHeader(d) {
    const r = d.run;
    const canCancel = UNFINISHED.includes(r.status);
    const canRetry = r.status === "failed" || r.status === "cancelled";
    const cancel = h("button", {id: "run-cancel", class: "admin-only danger", disabled: !canCancel,
      title: canCancel ? "cancel every unfinished task, its delays and its turns" : "only a pending, running or waiting run can be cancelled",
      onclick: () => { braid.act("Cancel run", () => api("POST", `/api/runs/${encodeURIComponent(r.id)}/cancel`)); }},
      "Cancel");
    const retry = h("button", {id: "run-retry", class: "admin-only primary", disabled: !canRetry,
      title: canRetry ? "retry from the failed steps; recorded steps are kept" : "only a failed or cancelled run can be retried",
      onclick: () => { braid.act("Retry run", () => api("POST", `/api/runs/${encodeURIComponent(r.id)}/retry`)); }},
      "Retry");
    const trace = d.trace_url
      ? h("a", {href: d.trace_url, target: "_blank", rel: "noopener noreferrer", id: "run-trace", class: "button"}, "Trace in Jaeger ↗")
      : null;

    const kv = h("dl", {class: "kv", id: "run-facts"},
      h("dt", {}, "Run"), h("dd", {}, h("code", {}, r.id)),
      h("dt", {}, "Workflow"), h("dd", {}, h("a", {href: "#/runs" + braid.qs({workflow: r.workflow})}, r.workflow)),
      r.idempotency_key ? [h("dt", {}, "Idempotency key"), h("dd", {}, h("code", {}, r.idempotency_key))] : null,
      h("dt", {}, "Created"), h("dd", {}, fmt.time(r.created_at), " ", h("span", {class: "muted"}, "(" + fmt.ago(r.created_at) + ")")),
      h("dt", {}, "Started"), h("dd", {}, fmt.time(r.started_at)),
      h("dt", {}, "Finished"), h("dd", {}, fmt.time(r.finished_at)),
      h("dt", {}, "Duration"), h("dd", {}, r.started_at ? fmt.between(r.started_at, r.finished_at) : "–"),
      h("dt", {}, "Trace"), h("dd", {}, d.trace_id
        ? (d.trace_url ? h("a", {href: d.trace_url, target: "_blank", rel: "noopener noreferrer"}, h("code", {}, d.trace_id)) : h("code", {}, d.trace_id))
        : h("span", {class: "muted"}, "none recorded")));

    const out = [
      h("h1", {}, "Run of ", h("code", {}, r.workflow), " ", h("span", {id: "run-status", class: "status s-" + r.status, "data-status": r.status}, r.status)),
      h("div", {class: "toolbar"}, cancel, retry, trace),
    ];
    if (d.failure) {
      const f = d.failure;
      out.push(h("ul", {class: "alerts", id: "run-failure"}, h("li", {},
        h("strong", {}, "Failed"), " in task ", h("code", {}, f.task_key),
        f.step ? [" at step ", h("code", {}, f.step)] : " (the error its turn returned)",
        f.error_kind === "panic" ? " — a panic" : "", ": ", truncate(f.error, 200))));
    } else if (r.error) {
      out.push(h("ul", {class: "alerts"}, h("li", {}, truncate(r.error, 200))));
    }
    out.push(kv);
    return out;
  }

  function renderBody(d, open) {
    const r = d.run;
    const byID = new Map(d.tasks.map(t => [t.id, t]));
    const errCard = r.error ? h("div", {class: "card"}, h("div", {class: "l"}, "Error of the run"), h("pre", {class: "run-error"}, r.error)) : null;
    if (errCard) errCard.style.gridColumn = "1 / -1";
    const io = h("div", {class: "cards run-io"},
      h("div", {class: "card"}, h("div", {class: "l"}, "Input"), jsonPre(r.input)),
      h("div", {class: "card"}, h("div", {class: "l"}, "Output"), jsonPre(r.output)),
      errCard);
    io.style.gridTemplateColumns = "repeat(2, minmax(0, 1fr))";
    return [
      io,
      h("h2", {}, "Timeline"), gantt(d, byID),
      (d.dags || []).map(g => dagLayers(g, d.tasks)),
      h("h2", {}, "Tasks ", h("span", {class: "muted"}, d.run.task_count > d.tasks.length
        ? "(the first " + d.tasks.length + " of " + d.run.task_count + ")" : "(" + d.tasks.length + ")")), taskTree(d.tasks, open),
      h("h2", {}, "Steps ", h("span", {class: "muted"}, "(" + d.steps.length + ")")), stepsTable(d, byID, open),
      d.delays.length ? [h("h2", {}, "Delays"), delaysTable(d.delays)] : null,
      h("h2", {}, "Turns"), turnsTable(d.tasks),
    ];
  }

  // taskTree nests each task under its parent.
  function taskTree(tasks, open) {
    const children = new Map();
    for (const t of tasks) {
      const k = t.parent_id || "";
      if (!children.has(k)) children.set(k, []);
      children.get(k).push(t);
    }
    const node = (t) => {
      const kids = children.get(t.id) || [];
      const summary = h("summary", {},
        status(t.status), " ", h("code", {class: "task-key"}, t.key), " ",
        h("span", {class: "muted"}, t.workflow + " · attempt " + t.attempt + "/" + t.max_attempts + " · " +
          t.turns + " turn" + (t.turns === 1 ? "" : "s") +
          (t.started_at ? " · " + fmt.between(t.started_at, t.finished_at) : "") +
          (t.remaining > 0 ? " · awaiting " + t.remaining : "")),
        t.error ? [" ", h("span", {class: "error"}, truncate(t.error, 80))] : null,
        t.skip_reason ? [" ", h("span", {class: "skip-reason"}, t.skip_reason)] : null);
      const key = "task:" + t.id;
      return h("li", {id: "task-" + t.id, class: "task task-" + t.status, "data-status": t.status},
        h("details", {"data-key": key, open: open.has(key)}, summary,
          h("dl", {class: "kv"},
            h("dt", {}, "Task"), h("dd", {}, h("code", {}, t.id)),
            h("dt", {}, "Input"), h("dd", {}, jsonPre(t.input)),
            h("dt", {}, "Output"), h("dd", {}, jsonPre(t.output)),
            t.error ? [h("dt", {}, "Error"), h("dd", {}, h("pre", {class: "task-error"}, t.error))] : null)),
        kids.length ? h("ul", {class: "tree"}, kids.map(node)) : null);
    };
    return h("ul", {class: "tree", id: "run-tree"}, (children.get("") || []).map(node));
  }

  // dagLayers draws a DAG's nodes layer by layer, as the server laid them
  // out: each node with its status, the nodes it waits for, and why it
  // was skipped, what failed it, or what it still awaits.
  function dagLayers(g, tasks) {
    const nodes = new Map(tasks.filter(t => t.node && t.parent_id === g.task_id).map(t => [t.key, t]));
    const item = (name) => {
      const t = nodes.get(name);
      if (!t) return h("li", {class: "dag-node", "data-node": name}, h("code", {class: "task-key"}, name));
      const deps = t.depends_on || [];
      let why = null;
      if (t.skip_reason) why = h("span", {class: "skip-reason"}, t.skip_reason);
      else if (t.error) why = h("span", {class: "error", title: t.error}, truncate(t.error, 100));
      else if (t.status === "blocked" && t.remaining > 0) why = h("span", {class: "muted"}, "awaiting " + t.remaining + " of " + deps.length);
      return h("li", {class: "dag-node task-" + t.status, "data-node": t.key, "data-status": t.status},
        status(t.status), " ", h("code", {class: "task-key"}, t.key),
        t.on_failure ? [" ", h("span", {class: "muted dag-deps", title: "runs after every other node, only if the DAG failed"}, "if the DAG fails")]
          : deps.length ? [" ", h("span", {class: "muted dag-deps", title: "runs after " + deps.join(", ")}, "← " + deps.join(", "))] : null,
        " ", h("span", {class: "muted"}, "· " + t.workflow),
        why ? [" ", why] : null);
    };
    return [
      h("h2", {}, "DAG ", h("code", {}, g.workflow), " ", h("span", {class: "muted"},
        "(task " + g.task_key + " · " + nodes.size + " node" + (nodes.size === 1 ? "" : "s") + " in " +
        g.layers.length + " layer" + (g.layers.length === 1 ? "" : "s") + ")")),
      h("ol", {class: "dag", "data-dag": g.task_id}, g.layers.map((layer, i) =>
        h("li", {class: "dag-layer", "data-layer": String(i + 1)},
          h("span", {class: "muted dag-layer-label"}, "layer " + (i + 1)),
          h("ul", {class: "tree"}, layer.map(item))))),
    ];
  }

  function stepsTable(d, byID, open) {
    const rows = d.steps.map(s => {
      const failed = s.status === "failed";
      const key = "step:" + s.task_id + ":" + s.name;
      return {
        attrs: {class: "step-row" + (failed ? " step-failed" : ""), "data-step": s.name, "data-status": s.status},
        cells: [
          h("code", {}, s.task_key),
          h("strong", {}, s.name),
          s.kind,
          status(s.status),
          String(s.attempts),
          s.kind === "delay"
            ? h("span", {}, "due " + fmt.time(s.resume_at))
            : h("span", {title: fmt.time(s.finished_at || s.created_at)}, fmt.time(s.finished_at || s.created_at)),
          s.error
            ? h("div", {}, h("div", {class: "error"}, (s.error_kind === "panic" ? "panic: " : "") + truncate(s.error.replace(/^panic: /, ""), 120)),
              h("pre", {class: "step-error"}, s.error))
            : s.kind === "detached" && typeof s.output === "string"
              // The start of a detached child: its output is the child's run.
              ? h("a", {href: "#/runs/" + encodeURIComponent(s.output), class: "run-link detached-run", title: s.output}, h("code", {}, shortID(s.output)))
              : (s.output !== undefined && s.output !== null ? bigJSON(s.output, key, open) : h("span", {class: "muted"}, "–")),
        ],
      };
    });
    // A step without a retry policy of its own fails its turn unrecorded:
    // the failure is the task's error, which names the step when the
    // task's code returned the step's error.
    if (d.failure && !d.failure.step_recorded) {
      const f = d.failure;
      const t = byID.get(f.task_id);
      rows.push({
        attrs: {class: "step-row step-failed step-unrecorded", "data-step": f.step || "", "data-status": "failed"},
        cells: [
          h("code", {}, f.task_key),
          f.step ? h("strong", {}, f.step) : h("em", {}, "after the last recorded step"),
          "turn",
          status("failed"),
          t ? String(t.attempt) : "",
          t ? fmt.time(t.finished_at) : "",
          h("div", {}, h("div", {class: "error"}, truncate(f.error, 120)), h("pre", {class: "step-error"}, f.error)),
        ],
      });
    }
    const table = braid.table(["Task", "Step", "Kind", "Status", "Attempts", "Recorded", "Output or error"], rows, {id: "run-steps"});
    table.querySelectorAll("tr.step-failed").forEach(tr => {
      tr.style.background = "#fef3f2";
      tr.style.boxShadow = "inset 3px 0 0 #f04438";
    });
    return table;
  }

  // bigJSON shows a short value inline and a long one folded.
  function bigJSON(v, key, open) {
    const text = fmt.json(v);
    if (text.length <= 200 && !text.includes("\n")) return h("code", {class: "step-output"}, text);
    return h("details", {"data-key": key, open: open.has(key)},
      h("summary", {}, truncate(text.replace(/\s+/g, " "), 80)), h("pre", {class: "step-output"}, text));
  }

  function delaysTable(delays) {
    return braid.table(["Task", "Delay", "Status", "Began", "Resume at", "Fired"], delays.map(dl => ({
      attrs: {class: "delay-row", "data-delay": dl.name},
      cells: [
        h("code", {}, dl.task_key), h("strong", {}, dl.name), status(dl.status), fmt.time(dl.created_at),
        h("span", {class: "resume-at"}, fmt.time(dl.resume_at), " ", h("span", {class: "muted"}, "(" + fmt.ago(dl.resume_at) + ")")),
        fmt.time(dl.fired_at),
      ],
    })), {id: "run-delays"});
  }

  function turnsTable(tasks) {
    const rows = [];
    for (const t of tasks) {
      (t.turn_jobs || []).forEach((tu, i) => {
        const errs = tu.errors || [];
        rows.push({
          attrs: {class: "turn-row" + (tu.state === "discarded" ? " step-failed-turn" : "")},
          cells: [
            h("code", {}, t.key), "turn " + (i + 1),
            h("a", {href: "#/jobs/" + tu.job_id, title: "the turn's River job"}, "#" + tu.job_id),
            status(tu.state), tu.attempt + "/" + tu.max_attempts,
            fmt.time(tu.attempted_at), fmt.time(tu.finalized_at),
            errs.length ? h("details", {}, h("summary", {class: "error"}, errs.length + " failed attempt" + (errs.length === 1 ? "" : "s") + ": " + truncate(errs[errs.length - 1].error, 80)),
              errs.map(e => [h("div", {class: "muted"}, "attempt " + e.attempt + " at " + fmt.time(e.at)), h("pre", {}, e.error)])) : "",
          ],
        });
      });
    }
    const note = tasks.some(t => (t.turn_jobs || []).length < t.turns)
      ? h("p", {class: "muted"}, "Some turn jobs were removed by River's job cleaner; the timeline shows the turns still kept.") : null;
    return [braid.table(["Task", "Turn", "Job", "State", "Attempt", "Attempted", "Finalized", "Errors"], rows, {id: "run-turns"}), note];
  }

  // ---- the Gantt chart -------------------------------------------------------

  // gantt draws one lane of turns, waits and delays per task, and one lane
  // of its steps, on a shared time axis.
  function gantt(d, byID) {
    const entries = d.timeline || [];
    if (!entries.length) return h("div", {class: "gantt", id: "run-timeline"}, h("p", {class: "muted"}, "Nothing has run yet."));
    const now = Date.now();
    const unfinished = UNFINISHED.includes(d.run.status);
    // What has not ended yet (a turn that runs, a wait, a delay due
    // later) is drawn up to now, so that an hour's delay does not squeeze
    // what already happened into a sliver; its tooltip says when it ends.
    const due = (e) => e.end ? new Date(e.end).getTime() : now;
    const endOf = (e) => unfinished ? Math.min(due(e), Math.max(now, new Date(e.start).getTime())) : due(e);
    let t0 = Infinity, t1 = -Infinity;
    for (const e of entries) {
      t0 = Math.min(t0, new Date(e.start).getTime());
      t1 = Math.max(t1, endOf(e));
    }
    if (d.run.finished_at) t1 = Math.max(t1, new Date(d.run.finished_at).getTime());
    const span = Math.max(t1 - t0, 1);
    const pct = (ms) => ((ms - t0) / span) * 100;

    const lanes = new Map(); // task id -> {work: [], steps: []}
    for (const t of d.tasks) lanes.set(t.id, {work: [], steps: []});
    for (const e of entries) {
      if (!lanes.has(e.task_id)) lanes.set(e.task_id, {work: [], steps: []});
      lanes.get(e.task_id)[e.kind === "step" ? "steps" : "work"].push(e);
    }

    const bar = (e) => {
      const failed = e.status === "failed" || e.status === "discarded";
      const cls = {turn: "turn", step: "step", wait: "wait", delay: "wait delay"}[e.kind] || e.kind;
      const start = new Date(e.start).getTime();
      const end = endOf(e);
      const clipped = end < due(e);
      const el = h("div", {
        class: "bar " + cls + (failed ? " failed" : "") + (e.end && !clipped ? "" : " open"),
        "data-kind": e.kind, "data-status": e.status,
        title: `${e.kind} ${e.name} (${e.task_key}): ${e.status}\n${fmt.time(e.start)} → ${e.end ? fmt.time(e.end) : "now"}` +
          ` · ${fmt.seconds(Math.max(end - start, 0) / 1000)}` + (e.resume_at ? `\nresumes at ${fmt.time(e.resume_at)}` : "") +
          (e.attempt ? ` · attempt ${e.attempt}` : ""),
      });
      el.style.left = pct(start).toFixed(3) + "%";
      el.style.width = Math.max(pct(end) - pct(start), 0).toFixed(3) + "%";
      if (e.kind === "delay") {
        el.style.backgroundImage = "repeating-linear-gradient(135deg, rgba(255,255,255,.45) 0 4px, transparent 4px 8px)";
      }
      if (!e.end || clipped) {
        el.style.opacity = "0.6";
        el.style.borderRight = "2px dashed #b54708";
      }
      return el;
    };

    const depth = (t) => {
      let n = 0;
      for (let p = t && byID.get(t.parent_id); p; p = byID.get(p.parent_id)) n++;
      return n;
    };
    const rows = [axis(t0, span, unfinished ? now : null)];
    for (const [taskID, lane] of lanes) {
      const t = byID.get(taskID);
      const key = t ? t.key : taskID.slice(-8);
      const indent = "\u00a0\u00a0".repeat(depth(t));
      rows.push(h("div", {class: "row", "data-task": taskID},
        h("div", {class: "label", title: key + (t ? " · " + t.workflow : "")}, indent, t ? status(t.status) : null, " ", h("code", {}, key)),
        h("div", {class: "lane"}, lane.work.map(bar))));
      if (lane.steps.length) {
        rows.push(h("div", {class: "row steps", "data-task": taskID},
          h("div", {class: "label muted"}, indent, "\u00a0\u00a0steps of " + key),
          h("div", {class: "lane"}, lane.steps.map(bar))));
      }
    }
    rows.push(h("div", {class: "row legend"}, h("div", {class: "label muted"}, fmt.seconds(span / 1000) + " in all"),
      h("div", {class: "toolbar"},
        legend("turn", "turn"), legend("step", "step"), legend("wait", "wait on children"),
        legend("wait delay", "delay"), legend("turn failed", "failed"))));
    return h("div", {class: "gantt", id: "run-timeline"}, rows);
  }

  function legend(cls, label) {
    const sw = h("span", {class: "bar " + cls});
    sw.style.position = "static";
    sw.style.display = "inline-block";
    sw.style.width = "1.4rem";
    sw.style.height = ".7rem";
    sw.style.verticalAlign = "middle";
    sw.style.marginRight = ".3rem";
    if (cls === "wait delay") sw.style.backgroundImage = "repeating-linear-gradient(135deg, rgba(255,255,255,.45) 0 4px, transparent 4px 8px)";
    return h("span", {class: "muted"}, sw, label);
  }

  // axis labels the time axis at five points, relative to the first entry.
  // now is null for a finished run.
  function axis(t0, span, now) {
    const lane = h("div", {class: "lane axis"});
    lane.style.background = "transparent";
    for (let i = 0; i <= 4; i++) {
      const x = i / 4;
      const atNow = i === 4 && now !== null && Math.abs(now - (t0 + span)) <= span * 0.01;
      const label = h("span", {class: "muted"}, i === 0 ? fmt.time(new Date(t0).toISOString())
        : (atNow ? "now · " : "") + "+" + fmt.seconds((span * x) / 1000));
      label.style.position = "absolute";
      label.style.fontSize = ".72rem";
      label.style.whiteSpace = "nowrap";
      label.style.left = (x * 100) + "%";
      if (i === 4) label.style.transform = "translateX(-100%)";
      else if (i > 0) label.style.transform = "translateX(-50%)";
      lane.append(label);
    }
    if (now !== null && now > t0 && now < t0 + span * 0.99) {
      const x = (now - t0) / span;
      const mark = h("span", {class: "now", title: "now"}, x > 0.9 ? "now ▾" : "▾ now");
      if (x > 0.9) mark.style.transform = "translateX(-100%)";
      mark.style.position = "absolute";
      mark.style.top = "-0.9rem";
      mark.style.fontSize = ".7rem";
      mark.style.color = "#b54708";
      mark.style.left = (x * 100).toFixed(2) + "%";
      lane.append(mark);
    }
    return h("div", {class: "row"}, h("div", {class: "label muted"}, "time"), lane);
  }
})();
