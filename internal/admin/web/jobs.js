// Jobs: the filterable list with counts by state and queue, a job's page
// with its live progress bar, errors and actions, the dead letters of jobs
// and runs with retry and bulk retry, and the dispatch forms.
"use strict";

(() => {
  const {h, api, fmt, status} = braid;
  const STATES = ["available", "scheduled", "retryable", "pending", "running", "completed", "cancelled", "discarded"];
  const PRIORITIES = [["1", "critical"], ["2", "high"], ["3", "normal"], ["4", "low"]];
  const TURN_KIND = "braid_task";

  function truncate(s, n) {
    if (!s) return "";
    const first = s.split("\n")[0];
    return first.length > n ? first.slice(0, n - 1) + "…" : first;
  }

  function shortID(id) {
    return id ? id.slice(-12) : "";
  }

  // bar renders a progress bar: a div.progress whose inner div's width is
  // the percent.
  function bar(percent, id) {
    const inner = h("div", {});
    inner.style.width = clamp(percent) + "%";
    return h("div", {class: "progress", id: id || null, role: "progressbar",
      "aria-valuemin": 0, "aria-valuemax": 100, "aria-valuenow": clamp(percent)}, inner);
  }

  function setBar(el, percent) {
    const p = clamp(percent);
    el.firstChild.style.width = p + "%";
    el.setAttribute("aria-valuenow", p);
  }

  // spaced gives a block the room below it that cards outside a grid lack.
  function spaced(el) {
    el.style.marginBottom = ".8rem";
    return el;
  }

  function clamp(p) {
    const n = Number(p) || 0;
    return Math.max(0, Math.min(100, Math.round(n)));
  }

  // runLink links a turn job to its run.
  function runLink(run) {
    if (!run) return null;
    return h("span", {},
      h("a", {href: "#/runs/" + run.run_id, title: "run " + run.run_id}, run.workflow + " · " + shortID(run.run_id)),
      " ", run.run_status ? status(run.run_status) : null);
  }

  // allowedNote turns an API error into a message, with its allowed values.
  function errText(e) {
    return e.message + (e.allowed && e.allowed.length ? " (allowed: " + e.allowed.join(", ") + ")" : "");
  }

  // ---- the list -----------------------------------------------------------

  braid.page("/jobs", async (params, main, query) => {
    const f = {
      status: query.get("status") || "",
      kind: query.get("kind") || "",
      queue: query.get("queue") || "",
      limit: query.get("limit") || "50",
      offset: query.get("offset") || "0",
    };
    const go = (changes) => {
      location.hash = "#/jobs" + braid.qs(Object.assign({}, f, {offset: "0"}, changes));
    };
    const inputs = {
      status: h("select", {name: "status", id: "jobs-status"},
        h("option", {value: ""}, "any state"),
        STATES.map(s => h("option", {value: s, selected: s === f.status}, s))),
      kind: h("input", {name: "kind", id: "jobs-kind", placeholder: "any kind", value: f.kind, size: 16, list: "jobs-kinds"}),
      queue: h("input", {name: "queue", id: "jobs-queue", placeholder: "any queue", value: f.queue, size: 12, list: "jobs-queues"}),
      limit: h("select", {name: "limit", id: "jobs-limit"},
        ["25", "50", "100", "200", "500"].map(n => h("option", {value: n, selected: n === f.limit}, n + " per page"))),
    };
    const kindList = h("datalist", {id: "jobs-kinds"});
    const queueList = h("datalist", {id: "jobs-queues"});
    const form = h("form", {class: "filters", id: "jobs-filters", onsubmit: (e) => {
      e.preventDefault();
      go({status: inputs.status.value, kind: inputs.kind.value.trim(), queue: inputs.queue.value.trim(), limit: inputs.limit.value});
    }},
      h("label", {}, "State", inputs.status),
      h("label", {}, "Kind", inputs.kind),
      h("label", {}, "Queue", inputs.queue),
      h("label", {}, "Page", inputs.limit),
      h("button", {type: "submit", class: "primary"}, "Filter"),
      h("button", {type: "button", onclick: () => { location.hash = "#/jobs"; }}, "Clear"),
      kindList, queueList);

    const cards = h("div", {class: "cards", id: "jobs-cards"});
    const byQueue = h("div", {id: "jobs-by-queue"});
    const list = h("div", {id: "jobs-list"});
    const summary = h("p", {class: "muted", id: "jobs-summary"});
    main.append(
      h("h1", {}, "Jobs"),
      cards,
      h("h2", {}, "By queue"), byQueue,
      h("h2", {}, "Jobs"), form, summary, list);

    // Live progress of the rows on screen, by job ID.
    let bars = new Map();
    let knownKinds = false;

    async function loadKinds() {
      if (knownKinds) return;
      knownKinds = true;
      try {
        const known = await api("GET", "/api/admin/dispatch/known");
        kindList.replaceChildren(...known.kinds.concat([TURN_KIND]).map(k => h("option", {value: k})));
      } catch (e) { knownKinds = false; }
    }

    async function refresh() {
      const [stats, page] = await Promise.all([
        api("GET", "/api/admin/jobs/stats"),
        api("GET", "/api/admin/jobs" + braid.qs({status: f.status, kind: f.kind, queue: f.queue, limit: f.limit, offset: f.offset})),
      ]);
      cards.replaceChildren(
        h("a", {class: "card" + (f.status === "" ? " active" : ""), href: "#/jobs" + braid.qs({kind: f.kind, queue: f.queue})},
          h("div", {class: "n"}, String(stats.total)), h("div", {class: "l"}, "all jobs")),
        ...STATES.map(s => h("a", {class: "card", href: "#/jobs" + braid.qs({status: s, kind: f.kind, queue: f.queue}), id: "jobs-count-" + s},
          h("div", {class: "n"}, String(stats.by_state[s] || 0)),
          h("div", {class: "l"}, status(s), s === "discarded" ? " dead letters" : ""))));
      const queues = Object.keys(stats.by_queue).sort();
      queueList.replaceChildren(...queues.map(q => h("option", {value: q})));
      const cols = ["available", "scheduled", "retryable", "running", "completed", "cancelled", "discarded"];
      byQueue.replaceChildren(braid.table(["queue"].concat(cols), queues.map(q => ({
        cells: [h("a", {href: "#/jobs" + braid.qs({queue: q})}, q)].concat(cols.map(s => {
          const n = stats.by_queue[q][s] || 0;
          return n ? h("a", {href: "#/jobs" + braid.qs({queue: q, status: s})}, String(n)) : h("span", {class: "muted"}, "0");
        })),
      }))));

      bars = new Map();
      const rows = page.items.map(j => {
        let progress = h("span", {class: "muted"}, "–");
        if (j.progress && (j.state === "running" || j.progress.percent > 0)) {
          const b = bar(j.progress.percent);
          const t = h("span", {class: "muted"}, " " + j.progress.percent + "%");
          bars.set(j.id, {bar: b, text: t});
          progress = h("span", {class: "row-actions"}, b, t);
        }
        return {attrs: {id: "job-row-" + j.id}, cells: [
          h("a", {href: "#/jobs/" + j.id}, "#" + j.id),
          j.kind === TURN_KIND ? h("span", {}, "turn ", runLink(j.run)) : j.kind,
          j.queue,
          status(j.state),
          j.priority_name,
          j.attempt + " / " + j.max_attempts,
          progress,
          h("span", {title: fmt.time(j.created_at)}, fmt.ago(j.created_at)),
          j.last_error ? h("span", {class: "error", title: j.last_error.error}, truncate(j.last_error.error, 70)) : "",
        ]};
      });
      list.replaceChildren(
        braid.table(["job", "kind", "queue", "state", "priority", "attempt", "progress", "created", "last error"], rows, {id: "jobs-table"}),
        braid.pager(page, (off) => { location.hash = "#/jobs" + braid.qs(Object.assign({}, f, {offset: String(off)})); }));
      summary.textContent = `${page.total} job${page.total === 1 ? "" : "s"} match` + (f.status ? ` · state ${f.status}` : "") +
        (f.kind ? ` · kind ${f.kind}` : "") + (f.queue ? ` · queue ${f.queue}` : "");
      loadKinds();
    }
    await refresh();
    // Progress moves on its events; the counts refresh every 3 s.
    return {
      refresh,
      every: 3,
      onEvent(ev) {
        if (ev.type !== "progress") return;
        const b = bars.get(ev.data.job_id);
        if (!b) return;
        setBar(b.bar, ev.data.percent);
        b.text.textContent = " " + clamp(ev.data.percent) + "%";
      },
    };
  }, "jobs");

  // ---- one job ------------------------------------------------------------

  braid.page("/jobs/:id", async (params, main) => {
    const id = Number(params.id);
    const path = "/api/admin/jobs/" + encodeURIComponent(params.id);
    let job = await api("GET", path);

    const stateEl = h("span", {id: "job-state"});
    const progressBar = bar(job.progress ? job.progress.percent : 0, "job-progress");
    const progressText = h("strong", {id: "job-progress-text"}, "0%");
    const progressMsg = h("span", {id: "job-progress-message", class: "muted"});
    const heartbeat = h("span", {id: "job-heartbeat", class: "muted"});
    const progressBox = spaced(h("section", {id: "job-progress-box", class: "card"},
      h("div", {class: "toolbar"}, h("strong", {}, "Progress"), progressText, progressMsg),
      progressBar, h("div", {class: "muted"}, heartbeat)));
    const kv = h("dl", {class: "kv", id: "job-kv"});
    const actions = h("div", {class: "toolbar admin-only", id: "job-actions"});
    const runBox = h("div", {id: "job-run"});
    const argsBox = h("div", {id: "job-args"});
    const errorsBox = h("div", {id: "job-errors"});
    const metaBox = h("details", {id: "job-metadata"});
    let lastProgressAt = "";

    main.append(
      h("p", {}, h("a", {href: "#/jobs"}, "← jobs")),
      h("h1", {}, "Job #" + id + " ", stateEl),
      runBox, progressBox, actions, kv,
      h("h2", {}, "Args"), argsBox,
      h("h2", {}, "Errors"), errorsBox,
      h("h2", {}, "Metadata"), metaBox);

    function showProgress(p) {
      if (!p) {
        setBar(progressBar, 0);
        progressText.textContent = "0%";
        progressMsg.textContent = "no progress reported";
        heartbeat.textContent = "";
        return;
      }
      // Keep the newest report: an event may arrive before a refresh's
      // response carrying an older one.
      if (lastProgressAt && p.updated_at && new Date(p.updated_at) < new Date(lastProgressAt)) return;
      lastProgressAt = p.updated_at || lastProgressAt;
      setBar(progressBar, p.percent);
      progressText.textContent = clamp(p.percent) + "%";
      progressMsg.textContent = p.message ? "· " + p.message : "";
      if (p.heartbeat_at) heartbeat.textContent = "attempt " + p.attempt + " · last heartbeat " + fmt.ago(p.heartbeat_at);
      else if (p.attempt) heartbeat.textContent = "attempt " + p.attempt;
    }

    function act(label, method, suffix, body) {
      return () => braid.act(label, async () => {
        try {
          await api(method, path + suffix, body === undefined ? undefined : body());
        } catch (e) {
          throw new Error(errText(e));
        }
      });
    }

    function fill(j) {
      job = j;
      stateEl.replaceChildren(status(j.state));
      showProgress(j.progress);
      progressBox.hidden = !j.progress && j.state !== "running";
      runBox.replaceChildren(...(j.run ? [spaced(h("p", {class: "card"},
        "Turn of run ", h("a", {href: "#/runs/" + j.run.run_id, id: "job-run-link"}, j.run.run_id),
        " (workflow ", h("strong", {}, j.run.workflow), ", task ", h("code", {}, shortID(j.run.task_id)), ") ",
        j.run.run_status ? status(j.run.run_status) : "",
        h("span", {class: "muted"}, " · a turn job is retried by retrying its run")))] : []));
      const rows = [
        ["kind", j.kind], ["queue", j.queue],
        ["priority", j.priority_name + " (" + j.priority + ")"],
        ["attempt", j.attempt + " of " + j.max_attempts],
        ["created", fmt.time(j.created_at) + " · " + fmt.ago(j.created_at)],
        ["scheduled", fmt.time(j.scheduled_at) + " · " + fmt.ago(j.scheduled_at)],
        ["attempted", j.attempted_at ? fmt.time(j.attempted_at) + " · " + fmt.ago(j.attempted_at) : "–"],
        ["finalized", j.finalized_at ? fmt.time(j.finalized_at) + " · " + fmt.ago(j.finalized_at) : "–"],
        ["ran", j.attempted_at ? fmt.between(j.attempted_at, j.finalized_at) : "–"],
        ["attempted by", (j.attempted_by || []).join(", ") || "–"],
        ["tags", (j.tags || []).join(", ") || "–"],
      ];
      kv.replaceChildren(...rows.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));

      const can = j.transitions || [];
      const finished = ["completed", "cancelled", "discarded"].includes(j.state);
      const buttons = [];
      if (can.includes("available") && finished) {
        buttons.push(h("button", {class: "primary", id: "job-retry",
          onclick: act(j.run ? "Retry run " + shortID(j.run.run_id) : "Retry job #" + id, "POST", "/retry")},
          j.run ? "Retry its run" : "Retry"));
      }
      if (can.includes("available") && !finished) {
        buttons.push(h("button", {id: "job-run-now", onclick: act("Run job #" + id + " now", "PUT", "/status", () => ({status: "available"}))}, "Run now"));
      }
      if (!finished) {
        const sel = h("select", {id: "job-priority"}, PRIORITIES.map(([n, name]) => h("option", {value: n, selected: Number(n) === j.priority}, name)));
        buttons.push(h("label", {}, "Priority", sel),
          h("button", {id: "job-set-priority", onclick: act("Priority of job #" + id, "PUT", "/priority", () => ({priority: Number(sel.value)}))}, "Set"),
          h("button", {id: "job-boost", disabled: j.priority <= 1, title: "raise the priority one level",
            onclick: act("Boost job #" + id, "POST", "/boost", () => ({boost: 1}))}, "Boost ↑"));
      }
      if (can.includes("cancelled") && !j.run) {
        buttons.push(h("button", {class: "danger", id: "job-cancel", onclick: () => {
          if (!confirm("Cancel job #" + id + "?" + (j.state === "running" ? " Its worker's context is cancelled." : ""))) return;
          act("Cancel job #" + id, "PUT", "/status", () => ({status: "cancelled"}))();
        }}, "Cancel"));
      }
      if (can.includes("cancelled") && j.run) {
        buttons.push(h("a", {href: "#/runs/" + j.run.run_id, class: "button"}, "Cancel from its run…"));
      }
      actions.replaceChildren(...buttons);
      actions.hidden = buttons.length === 0;

      argsBox.replaceChildren(h("pre", {id: "job-args-json"}, fmt.json(j.args)));
      metaBox.replaceChildren(h("summary", {}, "metadata"), h("pre", {}, fmt.json(j.metadata)));
      const errs = (j.errors || []).slice().reverse();
      errorsBox.replaceChildren(...(errs.length ? errs.map(e => spaced(h("div", {class: "card job-error"},
        h("div", {class: "toolbar"}, h("strong", {}, "attempt " + e.attempt), h("span", {class: "muted"}, fmt.time(e.at) + " · " + fmt.ago(e.at))),
        h("pre", {}, e.error),
        e.trace ? h("details", {}, h("summary", {}, "stack"), h("pre", {}, e.trace)) : null)))
        : [h("p", {class: "muted"}, "no errors")]));
    }
    fill(job);

    return {
      async refresh() {
        fill(await api("GET", path));
      },
      onEvent(ev) {
        if (ev.type !== "progress" || ev.data.job_id !== id) return;
        progressBox.hidden = false;
        showProgress(ev.data);
      },
    };
  }, "jobs");

  // ---- dead letters -------------------------------------------------------

  braid.page("/dead", async (params, main, query) => {
    const f = {
      kind: query.get("kind") || "",
      queue: query.get("queue") || "",
      offset: query.get("offset") || "0",
      runs_offset: query.get("runs_offset") || "0",
      workflow: query.get("workflow") || "",
    };
    const limit = 50;
    const nav = (changes) => { location.hash = "#/dead" + braid.qs(Object.assign({}, f, changes)); };
    const selectedJobs = new Set();
    const selectedRuns = new Set();

    const kind = h("input", {id: "dead-kind", placeholder: "any kind", value: f.kind, size: 16});
    const queueIn = h("input", {id: "dead-queue", placeholder: "any queue", value: f.queue, size: 12});
    const wf = h("input", {id: "dead-workflow", placeholder: "any workflow", value: f.workflow, size: 16});
    const jobsBox = h("div", {id: "dead-jobs"});
    const runsBox = h("div", {id: "dead-runs"});
    const retryJobs = h("button", {class: "primary admin-only", id: "dead-retry-selected", disabled: true}, "Retry selected");
    const retryRuns = h("button", {class: "primary admin-only", id: "dead-retry-runs", disabled: true}, "Retry selected runs");
    const jobsTotal = h("span", {class: "muted"});
    const runsTotal = h("span", {class: "muted"});

    main.append(
      h("h1", {}, "Dead letters"),
      h("p", {class: "muted"}, "Jobs that exhausted their attempts (River's discarded state) and runs that failed. A dead turn job is retried by retrying its run, from its failed step."),
      h("h2", {}, "Dead jobs ", jobsTotal),
      h("form", {class: "filters", onsubmit: (e) => { e.preventDefault(); nav({kind: kind.value.trim(), queue: queueIn.value.trim(), offset: "0"}); }},
        h("label", {}, "Kind", kind), h("label", {}, "Queue", queueIn),
        h("button", {type: "submit"}, "Filter"), retryJobs),
      jobsBox,
      h("h2", {}, "Failed runs ", runsTotal),
      h("form", {class: "filters", onsubmit: (e) => { e.preventDefault(); nav({workflow: wf.value.trim(), runs_offset: "0"}); }},
        h("label", {}, "Workflow", wf), h("button", {type: "submit"}, "Filter"), retryRuns),
      runsBox);

    function syncButtons() {
      retryJobs.disabled = selectedJobs.size === 0;
      retryJobs.textContent = selectedJobs.size ? `Retry ${selectedJobs.size} selected` : "Retry selected";
      retryRuns.disabled = selectedRuns.size === 0;
      retryRuns.textContent = selectedRuns.size ? `Retry ${selectedRuns.size} selected runs` : "Retry selected runs";
    }

    retryJobs.addEventListener("click", (e) => {
      e.preventDefault();
      const ids = [...selectedJobs];
      braid.act(`Retry ${ids.length} jobs`, async () => {
        const res = await api("POST", "/api/admin/jobs/bulk/retry", {job_ids: ids});
        selectedJobs.clear();
        syncButtons();
        if (res.failed) {
          const why = res.results.filter(r => !r.ok).map(r => "#" + r.id + ": " + r.error).join("; ");
          throw new Error(`${res.succeeded} retried, ${res.failed} not: ${why}`);
        }
      });
    });
    retryRuns.addEventListener("click", (e) => {
      e.preventDefault();
      const ids = [...selectedRuns];
      braid.act(`Retry ${ids.length} runs`, async () => {
        const failed = [];
        for (const id of ids) {
          try { await api("POST", "/api/runs/" + id + "/retry"); } catch (err) { failed.push(shortID(id) + ": " + err.message); }
        }
        selectedRuns.clear();
        syncButtons();
        if (failed.length) throw new Error(`${ids.length - failed.length} retried, ${failed.length} not: ` + failed.join("; "));
      });
    });

    function checkbox(set, id, all) {
      const c = h("input", {type: "checkbox", class: "admin-only", "data-id": id, checked: set.has(id),
        "aria-label": "select " + id});
      c.addEventListener("change", () => {
        if (c.checked) set.add(id); else set.delete(id);
        all.checked = false;
        syncButtons();
      });
      return c;
    }

    function selectAll(set, ids, boxes) {
      const all = h("input", {type: "checkbox", class: "admin-only", "aria-label": "select all"});
      all.addEventListener("change", () => {
        for (const id of ids) { if (all.checked) set.add(id); else set.delete(id); }
        boxes().forEach(c => { c.checked = all.checked; });
        syncButtons();
      });
      return all;
    }

    async function refresh() {
      const [jobs, runs] = await Promise.all([
        api("GET", "/api/admin/dead-letters/jobs" + braid.qs({kind: f.kind, queue: f.queue, limit, offset: f.offset})),
        api("GET", "/api/admin/dead-letters/runs" + braid.qs({workflow: f.workflow, limit, offset: f.runs_offset})),
      ]);
      jobsTotal.textContent = "· " + jobs.total;
      runsTotal.textContent = "· " + runs.total;

      const allJobs = selectAll(selectedJobs, jobs.items.map(j => j.id), () => jobsBox.querySelectorAll("tbody input[type=checkbox]"));
      const jobRows = jobs.items.map(j => ({attrs: {id: "dead-job-" + j.id}, cells: [
        checkbox(selectedJobs, j.id, allJobs),
        h("a", {href: "#/jobs/" + j.id}, "#" + j.id),
        j.kind === TURN_KIND ? "turn" : j.kind,
        j.run ? runLink(j.run) : h("span", {class: "muted"}, "–"),
        j.queue,
        j.attempt + " / " + j.max_attempts,
        j.last_error ? h("span", {class: "error", title: j.last_error.error}, truncate(j.last_error.error, 80)) : "",
        h("span", {title: fmt.time(j.finalized_at)}, fmt.ago(j.finalized_at)),
        h("span", {class: "row-actions admin-only"},
          h("button", {onclick: () => braid.act(j.run ? "Retry run " + shortID(j.run.run_id) : "Retry job #" + j.id, async () => {
            try { await api("POST", "/api/admin/jobs/" + j.id + "/retry"); } catch (e) { throw new Error(errText(e)); }
          })}, j.run ? "Retry run" : "Retry")),
      ]}));
      jobsBox.replaceChildren(
        braid.table([allJobs, "job", "kind", "run", "queue", "attempts", "last error", "discarded", ""], jobRows, {id: "dead-jobs-table"}),
        braid.pager(jobs, (off) => nav({offset: String(off)})));

      const allRuns = selectAll(selectedRuns, runs.items.map(r => r.id), () => runsBox.querySelectorAll("tbody input[type=checkbox]"));
      const runRows = runs.items.map(r => ({attrs: {id: "dead-run-" + r.id}, cells: [
        checkbox(selectedRuns, r.id, allRuns),
        h("a", {href: "#/runs/" + r.id, title: r.id}, shortID(r.id)),
        r.workflow,
        r.error ? h("span", {class: "error", title: r.error}, truncate(r.error, 90)) : "",
        h("span", {title: fmt.time(r.created_at)}, fmt.ago(r.created_at)),
        h("span", {title: fmt.time(r.finished_at)}, fmt.ago(r.finished_at)),
        h("span", {class: "row-actions admin-only"},
          h("button", {onclick: () => braid.act("Retry run " + shortID(r.id), () => api("POST", "/api/runs/" + r.id + "/retry"))}, "Retry")),
      ]}));
      runsBox.replaceChildren(
        braid.table([allRuns, "run", "workflow", "error", "created", "failed", ""], runRows, {id: "dead-runs-table"}),
        braid.pager(runs, (off) => nav({runs_offset: String(off)})));
      // Drop selections that left the page (retried meanwhile).
      const onPage = new Set(jobs.items.map(j => j.id));
      for (const id of [...selectedJobs]) if (!onPage.has(id)) selectedJobs.delete(id);
      const runsOnPage = new Set(runs.items.map(r => r.id));
      for (const id of [...selectedRuns]) if (!runsOnPage.has(id)) selectedRuns.delete(id);
      syncButtons();
    }
    await refresh();
    return {refresh};
  }, "dead");

  // ---- dispatch -----------------------------------------------------------

  braid.page("/dispatch", async (params, main, query) => {
    let known = {kinds: [], workflows: []};
    try { known = await api("GET", "/api/admin/dispatch/known"); } catch (e) { /* the forms work without suggestions */ }
    const admin = braid.isAdmin();

    function parseJSON(text, what) {
      const t = text.trim();
      if (!t) return undefined;
      try { return JSON.parse(t); } catch (e) { throw new Error(what + " is not valid JSON: " + e.message); }
    }

    function chips(names, input) {
      return h("span", {class: "row-actions"}, names.map(n =>
        h("button", {type: "button", onclick: () => { input.value = n; input.focus(); }}, n)));
    }

    // The job form.
    const jk = h("input", {id: "dispatch-kind", required: true, list: "dispatch-kinds", placeholder: "kind", value: query.get("kind") || "", size: 24});
    const ja = h("textarea", {id: "dispatch-args", rows: 6, spellcheck: "false"}, "{}");
    const jq = h("input", {id: "dispatch-queue", placeholder: "default", size: 14});
    const jp = h("select", {id: "dispatch-priority"}, PRIORITIES.map(([n, name]) => h("option", {value: n, selected: n === "3"}, name)));
    const jm = h("input", {id: "dispatch-max-attempts", type: "number", min: 1, placeholder: "25", size: 6});
    const js = h("input", {id: "dispatch-scheduled-at", type: "datetime-local"});
    const jkey = h("input", {id: "dispatch-job-key", placeholder: "optional", size: 20});
    const jf = h("input", {id: "dispatch-job-force", type: "checkbox"});
    const jobOut = h("div", {id: "dispatch-job-result"});
    const jobForm = h("form", {id: "dispatch-job-form", onsubmit: async (e) => {
      e.preventDefault();
      jobOut.replaceChildren();
      try {
        const body = {kind: jk.value.trim(), args: parseJSON(ja.value, "args") || {}, priority: Number(jp.value), force: jf.checked};
        if (jq.value.trim()) body.queue = jq.value.trim();
        if (jm.value) body.max_attempts = Number(jm.value);
        if (js.value) body.scheduled_at = new Date(js.value).toISOString();
        if (jkey.value.trim()) body.idempotency_key = jkey.value.trim();
        const res = await api("POST", "/api/admin/dispatch/job", body);
        jobOut.replaceChildren(h("p", {class: "card"}, res.existing ? "Existing job " : "Enqueued job ",
          h("a", {href: "#/jobs/" + res.job.id, id: "dispatch-job-link"}, "#" + res.job.id), " ",
          status(res.job.state), h("span", {class: "muted"}, ` · ${res.job.kind} on ${res.job.queue}, ${res.job.priority_name}`)));
        braid.flash(res.existing ? "The job existed already (same idempotency key)" : "Job #" + res.job.id + " enqueued", "ok");
      } catch (err) {
        jobOut.replaceChildren(h("p", {class: "error", id: "dispatch-job-error"}, err.message),
          err.allowed && err.allowed.length && err.status === 422 && !err.message.startsWith("unknown priority") ? h("p", {}, "Known kinds: ", chips(err.allowed, jk)) : null);
      }
    }},
      h("h2", {}, "Enqueue a job"),
      h("label", {}, "Kind", jk),
      h("label", {}, "Args (JSON object)", ja),
      h("div", {class: "toolbar"}, h("label", {}, "Queue", jq), h("label", {}, "Priority", jp), h("label", {}, "Max attempts", jm)),
      h("div", {class: "toolbar"}, h("label", {}, "Run at (optional)", js), h("label", {}, "Idempotency key", jkey)),
      h("label", {class: "check"}, h("span", {}, jf, " force: enqueue a kind the database has never seen")),
      h("div", {class: "toolbar"}, h("button", {type: "submit", class: "primary admin-only", id: "dispatch-job-submit"}, "Enqueue")),
      jobOut,
      h("datalist", {id: "dispatch-kinds"}, known.kinds.map(k => h("option", {value: k}))));

    // The run form.
    const rw = h("input", {id: "dispatch-workflow", required: true, list: "dispatch-workflows", placeholder: "workflow", value: query.get("workflow") || "", size: 24});
    const ri = h("textarea", {id: "dispatch-input", rows: 6, spellcheck: "false"}, "{}");
    const rkey = h("input", {id: "dispatch-run-key", placeholder: "optional", size: 20});
    const rf = h("input", {id: "dispatch-run-force", type: "checkbox"});
    const runOut = h("div", {id: "dispatch-run-result"});
    const runForm = h("form", {id: "dispatch-run-form", onsubmit: async (e) => {
      e.preventDefault();
      runOut.replaceChildren();
      try {
        const body = {workflow: rw.value.trim(), force: rf.checked};
        const input = parseJSON(ri.value, "input");
        if (input !== undefined) body.input = input;
        if (rkey.value.trim()) body.idempotency_key = rkey.value.trim();
        const res = await api("POST", "/api/admin/dispatch/run", body);
        runOut.replaceChildren(h("p", {class: "card"}, res.run.existing ? "Existing run " : "Started run ",
          h("a", {href: "#/runs/" + res.run.id, id: "dispatch-run-link"}, res.run.id),
          h("span", {class: "muted"}, " · " + res.run.workflow)));
        braid.flash(res.run.existing ? "The run existed already (same idempotency key)" : "Run " + shortID(res.run.id) + " started", "ok");
      } catch (err) {
        runOut.replaceChildren(h("p", {class: "error", id: "dispatch-run-error"}, err.message),
          err.allowed && err.allowed.length && err.status === 422 ? h("p", {}, "Known workflows: ", chips(err.allowed, rw)) : null);
      }
    }},
      h("h2", {}, "Start a run"),
      h("label", {}, "Workflow", rw),
      h("label", {}, "Input (JSON)", ri),
      h("label", {}, "Idempotency key", rkey),
      h("label", {class: "check"}, h("span", {}, rf, " force: start a workflow the database has never seen")),
      h("div", {class: "toolbar"}, h("button", {type: "submit", class: "primary admin-only", id: "dispatch-run-submit"}, "Start run")),
      runOut,
      h("datalist", {id: "dispatch-workflows"}, known.workflows.map(w => h("option", {value: w}))));

    for (const form of [jobForm, runForm]) {
      form.classList.add("card");
      form.style.display = "flex";
      form.style.flexDirection = "column";
      form.style.gap = ".6rem";
      if (!admin) form.querySelectorAll("input, textarea, select").forEach(el => { el.disabled = true; });
    }
    const grid = h("div", {id: "dispatch-forms"}, jobForm, runForm);
    grid.style.display = "grid";
    grid.style.gridTemplateColumns = "repeat(auto-fit, minmax(380px, 1fr))";
    grid.style.gap = "1rem";
    grid.style.alignItems = "start";

    main.append(...[
      h("h1", {}, "Dispatch"),
      h("p", {class: "muted"}, "Enqueue a job of a kind with JSON args, or start a run of a workflow with JSON input. " +
        "Names are checked against what the database has seen (" + known.kinds.length + " kinds, " + known.workflows.length + " workflows); " +
        "force skips the check for what is deployed but has never run."),
      admin ? null : h("p", {class: "error"}, "This token is read-only: dispatching needs an admin token."),
      grid].filter(Boolean));
    return null;
  }, "dispatch");
})();
