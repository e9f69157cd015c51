// Schedules (cron schedules, the classic job-queue admin API's scheduled jobs) with create, edit,
// toggle, run now and delete; recurring jobs (one row per entity) with
// enable, disable and revive; leases and queues with pause and resume.
"use strict";

(() => {
  const {h, api, fmt, status} = braid;
  const PRIORITIES = [["1", "1 · critical"], ["2", "2 · high"], ["3", "3 · normal"], ["4", "4 · low"]];
  const OVERLAPS = [["skip", "skip a slot while the previous fire runs"], ["allow", "allow overlapping fires"]];
  const CATCHUPS = [["once", "fire once for missed slots"], ["skip", "skip missed slots"], ["all", "fire every missed slot"]];

  function truncate(s, n) {
    if (!s) return "";
    const first = s.split("\n")[0];
    return first.length > n ? first.slice(0, n - 1) + "…" : first;
  }

  // badge shows a word in the colours of a River state: green for
  // completed, red for discarded, amber for waiting, grey for cancelled.
  function badge(text, like) {
    return h("span", {class: "status s-" + like}, text);
  }

  function when(t) {
    if (!t) return h("span", {class: "muted"}, "–");
    return h("span", {title: fmt.time(t)}, fmt.ago(t));
  }

  function select(name, id, options, value) {
    return h("select", {name, id}, options.map(([v, label]) => h("option", {value: v, selected: String(value) === v}, label)));
  }

  // errorBox shows an API error, with the values it allows.
  function showError(box, e) {
    box.replaceChildren(h("span", {}, h("strong", {}, e.status ? "Error " + e.status + ": " : "Error: "), e.message,
      e.allowed && e.allowed.length ? h("span", {class: "muted"}, " (allowed: " + e.allowed.join(", ") + ")") : null));
    box.hidden = false;
  }

  // ---- schedules -----------------------------------------------------------

  braid.page("/schedules", async (params, main, query) => {
    const f = {enabled: query.get("enabled") || "", limit: query.get("limit") || "50", offset: query.get("offset") || "0"};
    const go = (changes) => { location.hash = "#/schedules" + braid.qs(Object.assign({}, f, {offset: "0"}, changes)); };

    const formBox = h("div", {id: "schedule-form-box", hidden: true});
    const summary = h("p", {class: "muted", id: "schedules-total"});
    const body = h("div", {id: "schedules-list"});
    const filter = select("enabled", "schedules-enabled", [["", "enabled and disabled"], ["true", "enabled only"], ["false", "disabled only"]], f.enabled);
    filter.addEventListener("change", () => go({enabled: filter.value}));
    main.append(
      h("h1", {}, "Schedules"),
      h("p", {class: "muted"}, "Durable cron schedules: each slot inserts a River job or starts a workflow run, in the transaction that advances it. ",
        "Expressions: @hourly, @daily, @weekly, @monthly, @yearly, @every 30m, @every 7d, or 5-field cron such as 0 3 * * MON-FRI."),
      h("div", {class: "toolbar"},
        h("label", {}, "Show", filter),
        h("button", {type: "button", class: "primary admin-only", id: "schedule-new", onclick: () => openForm(null)}, "+ New schedule")),
      formBox, summary, body);

    // openForm shows the create form, or the edit form of sch.
    function openForm(sch) {
      const editing = !!sch;
      const v = sch || {name: "", description: "", cron_expression: "@daily", time_zone: "UTC", enabled: true, priority: 3,
        target_type: "job", kind: "", args: {}, workflow: "", input: null, queue: "default", max_attempts: 0,
        overlap_policy: "skip", catch_up_policy: "once"};
      const payload = v.target_type === "workflow" ? v.input : v.args;
      const i = {
        name: h("input", {name: "name", id: "sf-name", value: v.name, required: true, disabled: editing, size: 28, placeholder: "daily-askreddit"}),
        description: h("input", {name: "description", id: "sf-description", value: v.description, size: 40, placeholder: "what it is for"}),
        cron: h("input", {name: "cron_expression", id: "sf-cron", value: v.cron_expression, required: true, size: 18, placeholder: "@daily"}),
        tz: h("input", {name: "time_zone", id: "sf-tz", value: v.time_zone, size: 16, placeholder: "UTC"}),
        type: select("target_type", "sf-type", [["job", "a job of kind"], ["workflow", "a run of workflow"]], v.target_type),
        target: h("input", {name: "target", id: "sf-target", value: v.target_type === "workflow" ? v.workflow : v.kind, required: true, size: 22, placeholder: "fetch_feed"}),
        payload: h("textarea", {name: "payload", id: "sf-payload", rows: 4, cols: 48}),
        queue: h("input", {name: "queue", id: "sf-queue", value: v.queue, size: 12}),
        priority: select("priority", "sf-priority", PRIORITIES, v.priority),
        attempts: h("input", {name: "max_attempts", id: "sf-attempts", type: "number", min: 0, value: v.max_attempts || 0, size: 4}),
        overlap: select("overlap_policy", "sf-overlap", OVERLAPS, v.overlap_policy),
        catchup: select("catch_up_policy", "sf-catchup", CATCHUPS, v.catch_up_policy),
        enabled: h("input", {type: "checkbox", name: "enabled", id: "sf-enabled", checked: v.enabled}),
      };
      i.payload.value = payload === null || payload === undefined ? "" : JSON.stringify(payload, null, 2);
      const payloadLabel = h("span", {});
      const queueLabel = h("label", {}, "Queue", i.queue);
      const syncType = () => {
        const job = i.type.value === "job";
        payloadLabel.textContent = job ? "Args (a JSON object)" : "Input (any JSON)";
        i.target.placeholder = job ? "fetch_feed" : "send_digest";
        queueLabel.hidden = !job;
      };
      i.type.addEventListener("change", syncType);
      syncType();
      const err = h("p", {class: "error", id: "sf-error", hidden: true});
      const submit = h("button", {type: "submit", class: "primary", id: "sf-submit"}, editing ? "Save changes" : "Create schedule");

      const form = h("form", {class: "card", id: "schedule-form", onsubmit: async (e) => {
        e.preventDefault();
        err.hidden = true;
        let data;
        const text = i.payload.value.trim();
        if (text) {
          try { data = JSON.parse(text); } catch (x) {
            showError(err, {message: payloadLabel.textContent + " is not valid JSON: " + x.message});
            return;
          }
          if (i.type.value === "job" && (data === null || typeof data !== "object" || Array.isArray(data))) {
            showError(err, {message: "the args of a job must be a JSON object, such as {\"feed_id\": 42}"});
            return;
          }
        }
        if (!i.cron.value.trim()) { showError(err, {message: "a cron expression is required"}); return; }
        if (!i.target.value.trim()) { showError(err, {message: (i.type.value === "job" ? "a job kind" : "a workflow name") + " is required"}); return; }
        const req = {
          description: i.description.value,
          cron_expression: i.cron.value.trim(),
          time_zone: i.tz.value.trim() || "UTC",
          enabled: i.enabled.checked,
          priority: Number(i.priority.value),
          max_attempts: Number(i.attempts.value || 0),
          overlap_policy: i.overlap.value,
          catch_up_policy: i.catchup.value,
        };
        if (i.type.value === "job") {
          req.kind = i.target.value.trim();
          req.queue = i.queue.value.trim() || "default";
          if (data !== undefined) req.args = data;
          else if (editing) req.args = {};
        } else {
          req.workflow = i.target.value.trim();
          if (data !== undefined) req.input = data;
        }
        submit.disabled = true;
        try {
          if (editing) {
            await api("PUT", "/api/admin/scheduled-jobs/" + encodeURIComponent(v.name), req);
            braid.flash("Schedule " + v.name + " saved", "ok");
          } else {
            req.name = i.name.value.trim();
            if (!req.name) { showError(err, {message: "a name is required"}); return; }
            await api("POST", "/api/admin/scheduled-jobs", req);
            braid.flash("Schedule " + req.name + " created", "ok");
          }
          closeForm();
          braid.refresh();
        } catch (x) {
          showError(err, x);
        } finally {
          submit.disabled = false;
        }
      }},
        h("h2", {}, editing ? "Edit schedule " + v.name : "New schedule"),
        h("div", {class: "toolbar"},
          h("label", {}, "Name", i.name),
          h("label", {}, "Description", i.description)),
        h("div", {class: "toolbar"},
          h("label", {}, "Cron expression", i.cron),
          h("label", {}, "Time zone", i.tz),
          h("label", {}, "Overlap", i.overlap),
          h("label", {}, "Missed slots", i.catchup)),
        h("div", {class: "toolbar"},
          h("label", {}, "Fires", i.type),
          h("label", {}, "Kind or workflow", i.target),
          queueLabel,
          h("label", {}, "Priority", i.priority),
          h("label", {}, "Max attempts (0: default)", i.attempts),
          h("label", {}, h("span", {}, "Enabled"), i.enabled)),
        h("label", {}, payloadLabel, i.payload),
        err,
        h("div", {class: "toolbar"}, submit, h("button", {type: "button", id: "sf-cancel", onclick: closeForm}, "Cancel")));
      formBox.replaceChildren(form);
      formBox.hidden = false;
      (editing ? i.cron : i.name).focus();
    }

    function closeForm() {
      formBox.replaceChildren();
      formBox.hidden = true;
    }

    function target(sch) {
      if (sch.target_type === "workflow") {
        return h("span", {}, "run of ", h("a", {href: "#/runs" + braid.qs({workflow: sch.workflow})}, h("code", {}, sch.workflow)));
      }
      return h("span", {}, "job ", h("code", {}, sch.kind), h("span", {class: "muted"}, " in " + sch.queue + " · priority " + sch.priority));
    }

    function lastRun(sch) {
      if (!sch.last_run_at) return h("span", {class: "muted"}, "never");
      const what = sch.last_job_id ? h("a", {href: "#/jobs/" + sch.last_job_id}, "job " + sch.last_job_id)
        : sch.last_run_id ? h("a", {href: "#/runs/" + encodeURIComponent(sch.last_run_id)}, "run " + sch.last_run_id.slice(-12)) : null;
      return h("span", {}, when(sch.last_run_at), what ? [h("br"), what] : null);
    }

    function lastError(sch) {
      if (!sch.last_error) return h("span", {class: "muted"}, "none");
      return h("div", {class: "error", title: sch.last_error},
        truncate(sch.last_error, 80),
        h("div", {class: "muted"}, sch.fire_failures + " failed fire" + (sch.fire_failures === 1 ? "" : "s") +
          (sch.retry_at ? ", retried " + fmt.ago(sch.retry_at) : "")));
    }

    function nextRun(sch) {
      if (!sch.enabled) return h("span", {class: "muted", title: fmt.time(sch.next_run_at)}, "disabled");
      const late = new Date(sch.next_run_at).getTime() < Date.now() - 60000;
      return h("span", {title: fmt.time(sch.next_run_at), class: late ? "error" : null}, fmt.ago(sch.next_run_at), late ? " (missed)" : "");
    }

    async function refresh() {
      const list = await api("GET", "/api/admin/scheduled-jobs" + braid.qs(f));
      summary.textContent = list.total === undefined ? "" : list.total + " schedule" + (list.total === 1 ? "" : "s");
      const path = (sch) => "/api/admin/scheduled-jobs/" + encodeURIComponent(sch.name);
      const rows = list.items.map(sch => ({
        attrs: {"data-schedule": sch.name, class: sch.enabled ? null : "muted"},
        cells: [
          h("div", {}, h("strong", {}, sch.name), sch.description ? h("div", {class: "muted"}, sch.description) : null),
          h("div", {}, h("code", {}, sch.cron_expression), sch.time_zone !== "UTC" ? h("div", {class: "muted"}, sch.time_zone) : null),
          target(sch),
          h("div", {}, (sch.enabled ? badge("enabled", "completed") : badge("disabled", "cancelled")), " ",
            h("button", {class: "admin-only toggle", title: sch.enabled ? "disable: slots stop firing" : "enable: resumes at its next slot",
              onclick: () => braid.act((sch.enabled ? "Disable " : "Enable ") + sch.name,
                () => api("POST", path(sch) + "/toggle", {enabled: !sch.enabled}))}, sch.enabled ? "Disable" : "Enable")),
          nextRun(sch),
          lastRun(sch),
          lastError(sch),
          h("div", {class: "row-actions"},
            h("button", {class: "admin-only primary run-now", title: "fire once now; the next slot stays",
              onclick: () => braid.act("Run " + sch.name + " now", async () => {
                const fire = await api("POST", path(sch) + "/run");
                braid.flash("Ran " + sch.name + ": " + (fire.job_id ? "job " + fire.job_id : "run " + fire.run_id), "ok");
              })}, "Run now"),
            h("button", {class: "admin-only edit", onclick: () => openForm(sch)}, "Edit"),
            h("button", {class: "admin-only danger delete", onclick: () => {
              if (!confirm("Delete schedule " + sch.name + "? The jobs and runs it fired stay.")) return;
              braid.act("Delete " + sch.name, () => api("DELETE", path(sch)));
            }}, "Delete")),
        ],
      }));
      body.replaceChildren(
        braid.table(["Schedule", "When", "Fires", "State", "Next run", "Last run", "Last error", ""], rows, {id: "schedules-table"}),
        braid.pager(list, (offset) => { location.hash = "#/schedules" + braid.qs(Object.assign({}, f, {offset: String(offset)})); }));
    }

    await refresh();
    return {refresh};
  }, "schedules");

  // ---- recurring jobs ------------------------------------------------------

  braid.page("/recurring", async (params, main, query) => {
    const f = {
      kind: query.get("kind") || "", enabled: query.get("enabled") || "", dead: query.get("dead") || "",
      limit: query.get("limit") || "50", offset: query.get("offset") || "0",
    };
    const go = (changes) => { location.hash = "#/recurring" + braid.qs(Object.assign({}, f, {offset: "0"}, changes)); };
    const i = {
      kind: h("input", {name: "kind", id: "rec-kind", value: f.kind, placeholder: "any kind", size: 16}),
      enabled: select("enabled", "rec-enabled", [["", "enabled and disabled"], ["true", "enabled"], ["false", "disabled"]], f.enabled),
      dead: select("dead", "rec-dead", [["", "live and dead"], ["false", "live"], ["true", "dead letters"]], f.dead),
      limit: select("limit", "rec-limit", ["25", "50", "100", "200"].map(n => [n, n + " per page"]), f.limit),
    };
    const form = h("form", {class: "filters", id: "recurring-filters", onsubmit: (e) => {
      e.preventDefault();
      go({kind: i.kind.value.trim(), enabled: i.enabled.value, dead: i.dead.value, limit: i.limit.value});
    }},
      h("label", {}, "Kind", i.kind), h("label", {}, "Enabled", i.enabled), h("label", {}, "State", i.dead),
      h("label", {}, "Page", i.limit),
      h("button", {type: "submit", class: "primary"}, "Filter"),
      h("button", {type: "button", onclick: () => { location.hash = "#/recurring"; }}, "Clear"));
    const summary = h("p", {class: "muted", id: "recurring-total"});
    const body = h("div", {id: "recurring-list"});
    main.append(h("h1", {}, "Recurring jobs"),
      h("p", {class: "muted"}, "One durable row per entity. Disabled rather than deleted; after too many failures in a row a row is parked as a dead letter until revived."),
      form, summary, body);

    function state(rj) {
      if (rj.dead) return h("span", {title: "dead since " + fmt.time(rj.dead_at)}, badge("dead", "discarded"));
      if (rj.running) {
        return h("span", {}, status("running"), rj.job_id ? [" ", h("a", {href: "#/jobs/" + rj.job_id}, "job " + rj.job_id)] : null,
          h("div", {class: "muted"}, "since " + fmt.ago(rj.running_since)));
      }
      return h("span", {}, (rj.enabled ? badge("idle", "completed") : badge("disabled", "cancelled")),
        rj.job_id ? h("div", {class: "muted"}, h("a", {href: "#/jobs/" + rj.job_id}, "last job " + rj.job_id), rj.job_state ? " · " + rj.job_state : "") : null);
    }

    async function refresh() {
      const list = await api("GET", "/api/admin/recurring" + braid.qs(f));
      summary.textContent = list.total === undefined ? "" : list.total + " recurring job" + (list.total === 1 ? "" : "s");
      const path = (rj) => "/api/admin/recurring/" + encodeURIComponent(rj.kind) + "/" + encodeURIComponent(rj.key);
      const rows = list.items.map(rj => ({
        attrs: {"data-recurring": rj.kind + "/" + rj.key},
        cells: [
          h("a", {href: "#/recurring" + braid.qs({kind: rj.kind})}, h("code", {}, rj.kind)),
          h("code", {}, rj.key),
          (rj.enabled ? badge("enabled", "completed") : badge("disabled", "cancelled")),
          state(rj),
          rj.enabled && !rj.dead ? h("span", {title: fmt.time(rj.next_run_at)}, fmt.ago(rj.next_run_at))
            : h("span", {class: "muted", title: "kept: " + fmt.time(rj.next_run_at)}, "–"),
          when(rj.last_run_at),
          h("span", {class: rj.consecutive_failures ? "error" : "muted"}, String(rj.consecutive_failures)),
          rj.last_error ? h("span", {class: "error", title: rj.last_error}, truncate(rj.last_error, 70)) : h("span", {class: "muted"}, "none"),
          h("div", {class: "row-actions"},
            rj.enabled
              ? h("button", {class: "admin-only disable", onclick: () => braid.act("Disable " + rj.kind + "/" + rj.key, () => api("POST", path(rj) + "/disable"))}, "Disable")
              : h("button", {class: "admin-only enable", onclick: () => braid.act("Enable " + rj.kind + "/" + rj.key, () => api("POST", path(rj) + "/enable"))}, "Enable"),
            rj.dead || rj.consecutive_failures
              ? h("button", {class: "admin-only primary revive", title: "reset its failures and run it now",
                onclick: () => braid.act("Revive " + rj.kind + "/" + rj.key, () => api("POST", path(rj) + "/revive"))}, "Revive")
              : null),
        ],
      }));
      body.replaceChildren(
        braid.table(["Kind", "Key", "Enabled", "State", "Next run", "Last run", "Failures", "Last error", ""], rows, {id: "recurring-table"}),
        braid.pager(list, (offset) => { location.hash = "#/recurring" + braid.qs(Object.assign({}, f, {offset: String(offset)})); }));
    }

    await refresh();
    return {refresh};
  }, "recurring");

  // ---- leases and queues ---------------------------------------------------

  braid.page("/leases", async (params, main) => {
    const leases = h("div", {id: "leases-list"});
    const queues = h("div", {id: "queues-list"});
    main.append(h("h1", {}, "Leases & queues"),
      h("h2", {}, "Leases"),
      h("p", {class: "muted"}, "Named, time-bounded ownership: one process at a time runs the delay processor, the scheduler and the maintainer. The generation fences each term."),
      leases,
      h("h2", {}, "Queues"),
      h("p", {class: "muted"}, "Depth counts the jobs available now. A paused queue's jobs wait until it resumes; running jobs finish. River can pause only a queue that a client has worked lately."),
      queues);

    async function refresh() {
      const [ls, qs] = await Promise.all([api("GET", "/api/admin/leases"), api("GET", "/api/admin/queues")]);
      leases.replaceChildren(braid.table(["Lease", "Holder", "Generation", "Acquired", "Renewed", "Expires"], ls.items.map(l => ({
        attrs: {"data-lease": l.name},
        cells: [
          h("code", {}, l.name),
          l.expired ? h("span", {class: "muted"}, "nobody · last ", h("code", {}, l.holder)) : h("code", {}, l.holder),
          String(l.generation),
          when(l.acquired_at),
          when(l.renewed_at),
          l.expired ? h("span", {title: fmt.time(l.expires_at)}, badge("expired", "discarded"), " ", fmt.ago(l.expires_at))
            : h("span", {title: fmt.time(l.expires_at)}, "in " + fmt.seconds(Math.max(0, l.expires_in_seconds))),
        ],
      })), {id: "leases-table"}));

      queues.replaceChildren(braid.table(["Queue", "Depth", "Running", "Scheduled", "Retryable", "Completed", "Discarded", "Total", "State", ""],
        qs.items.map(q => ({
          attrs: {"data-queue": q.name},
          cells: [
            h("a", {href: "#/jobs" + braid.qs({queue: q.name})}, h("code", {}, q.name)),
            h("strong", {}, String(q.depth)),
            String(q.by_state.running || 0),
            String(q.by_state.scheduled || 0),
            String(q.by_state.retryable || 0),
            String(q.by_state.completed || 0),
            q.by_state.discarded ? h("span", {class: "error"}, String(q.by_state.discarded)) : "0",
            String(q.total),
            q.paused ? h("span", {title: "paused " + fmt.time(q.paused_at)}, badge("paused", "waiting"))
              : q.known ? h("span", {title: "worked; last seen " + fmt.time(q.updated_at)}, badge("active", "completed"))
                : h("span", {class: "muted", title: "no client has worked this queue lately"}, "no workers"),
            h("div", {class: "row-actions"},
              q.paused
                ? h("button", {class: "admin-only primary resume", onclick: () => braid.act("Resume " + q.name,
                  () => api("POST", "/api/admin/queues/" + encodeURIComponent(q.name) + "/resume"))}, "Resume")
                : h("button", {class: "admin-only pause", disabled: !q.known, title: q.known ? "stop fetching this queue's jobs" : "River can pause only a queue that a client works",
                  onclick: () => braid.act("Pause " + q.name, () => api("POST", "/api/admin/queues/" + encodeURIComponent(q.name) + "/pause"))}, "Pause")),
          ],
        })), {id: "queues-table"}));
    }

    await refresh();
    return {refresh};
  }, "leases");
})();
