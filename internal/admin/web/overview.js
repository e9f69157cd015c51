// Overview: the alerts of the classic job-queue monitoring alerts, counts, the last
// hour's throughput and failures per minute, jobs by state and queue, runs
// by status, and the lease holders. Refreshed on every tick.
"use strict";

(() => {
  const {h, api, fmt, status} = braid;
  const SVG = "http://www.w3.org/2000/svg";
  const JOB_STATES = ["available", "running", "scheduled", "retryable", "pending", "completed", "discarded", "cancelled"];
  const RUN_STATUSES = ["pending", "running", "waiting", "completed", "failed", "cancelled"];
  const ALERT_TITLES = {
    queue_depth: "Queue depth",
    failed_rate: "Failed rate",
    long_running: "Long-running job",
    missed_schedule: "Missed schedule",
  };

  // s builds an SVG element; attrs are set as attributes.
  function s(tag, attrs, ...children) {
    const el = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v !== null && v !== undefined) el.setAttribute(k, String(v));
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }

  function pct(x) {
    return (100 * x).toFixed(x > 0 && x < 0.01 ? 2 : 1) + "%";
  }

  function alertLink(a) {
    if (!a.subject) return null;
    switch (a.kind) {
      case "queue_depth": return h("a", {href: "#/jobs" + braid.qs({queue: a.subject, status: "available"})}, "jobs");
      case "long_running": return h("a", {href: "#/jobs/" + encodeURIComponent(a.subject)}, "job " + a.subject);
      case "missed_schedule": return h("a", {href: "#/schedules"}, "schedules");
    }
    return null;
  }

  function renderAlerts(list, alerts) {
    if (!alerts.length) {
      list.replaceChildren(h("li", {class: "none"}, "✓ All clear: no queue over its depth, no failed rate over its limit, no long-running job, no missed schedule."));
      return;
    }
    list.replaceChildren(...alerts.map(a => h("li", {class: "alert alert-" + a.kind, "data-kind": a.kind, "data-value": a.value, "data-threshold": a.threshold},
      h("strong", {}, (ALERT_TITLES[a.kind] || a.kind) + ": "),
      a.message,
      alertLink(a) ? [" · ", alertLink(a)] : null)));
  }

  function card(n, label, href, title) {
    const body = [h("div", {class: "n"}, String(n)), h("div", {class: "l"}, label)];
    if (!href) return h("div", {class: "card", title: title || null}, body);
    const a = h("a", {class: "card", href, title: title || null}, body);
    Object.assign(a.style, {textDecoration: "none", color: "inherit"});
    return a;
  }

  function renderCards(el, ov) {
    const j = ov.jobs.by_state, r = ov.runs.by_status, hr = ov.last_hour;
    el.replaceChildren(
      card(j.available || 0, "jobs available", "#/jobs" + braid.qs({status: "available"})),
      card(j.running || 0, "jobs running", "#/jobs" + braid.qs({status: "running"})),
      card((j.retryable || 0) + (j.scheduled || 0), "jobs retryable or scheduled"),
      card(j.discarded || 0, "dead letters (discarded jobs)", "#/dead"),
      card((r.running || 0) + (r.waiting || 0) + (r.pending || 0), "runs in progress", "#/runs" + braid.qs({status: "running"})),
      card(r.failed || 0, "runs failed", "#/runs" + braid.qs({status: "failed"})),
      card(hr.completed + hr.discarded, "jobs finished in the last hour", null, hr.completed + " completed, " + hr.discarded + " discarded"),
      card(pct(hr.failed_rate), "failed in the last hour", null, "discarded over finished, limit " + pct(ov.thresholds.failed_rate)),
      card(hr.runs_completed + hr.runs_failed, "runs finished in the last hour", null, hr.runs_completed + " completed, " + hr.runs_failed + " failed"),
      card(ov.schedules.enabled + " / " + ov.schedules.total, "schedules enabled" + (ov.schedules.failing ? ", " + ov.schedules.failing + " failing" : ""), "#/schedules"),
      card(ov.recurring.total, "recurring jobs" + (ov.recurring.dead ? ", " + ov.recurring.dead + " dead" : "") +
        (ov.recurring.running ? ", " + ov.recurring.running + " running" : ""), "#/recurring"),
    );
  }

  // chart draws one bar per minute: ok stacked under failed, with the
  // minute's counts in each bar's tooltip.
  function chart(buckets, okKey, failKey, okLabel, failLabel, id) {
    const W = 600, H = 120, top = 14, bottom = 18, left = 30;
    const plotH = H - top - bottom, plotW = W - left - 4;
    const max = Math.max(1, ...buckets.map(b => b[okKey] + b[failKey]));
    const step = plotW / Math.max(1, buckets.length);
    const y = (v) => top + plotH - (v / max) * plotH;
    const svg = s("svg", {viewBox: `0 0 ${W} ${H}`, width: "100%", role: "img", id, class: "chart",
      "aria-label": `${okLabel} and ${failLabel} per minute over the last hour`});
    // Grid: the baseline, the middle (when it is a whole number) and the
    // maximum.
    const ticks = max >= 2 && max % 2 === 0 ? [0, max / 2, max] : [0, max];
    for (const v of ticks) {
      svg.append(s("line", {x1: left, x2: W, y1: y(v), y2: y(v), stroke: "#e4e7ec", "stroke-width": 1}));
      svg.append(s("text", {x: left - 4, y: y(v) + 3, "text-anchor": "end", "font-size": 9, fill: "#667085"},
        String(v)));
    }
    buckets.forEach((b, i) => {
      const x = left + i * step + 0.5;
      const w = Math.max(1, step - 1.5);
      const ok = b[okKey], failed = b[failKey];
      const minute = new Date(b.minute);
      const label = minute.toISOString().slice(11, 16) + "Z: " + ok + " " + okLabel + ", " + failed + " " + failLabel;
      const g = s("g", {class: "bucket"}, s("title", {}, label));
      // A transparent column keeps the tooltip on empty minutes.
      g.append(s("rect", {x, y: top, width: w, height: plotH, fill: "transparent"}));
      if (ok > 0) g.append(s("rect", {x, y: y(ok), width: w, height: y(0) - y(ok), fill: "#12b76a", rx: 1}));
      if (failed > 0) g.append(s("rect", {x, y: y(ok + failed), width: w, height: y(ok) - y(ok + failed), fill: "#f04438", rx: 1}));
      svg.append(g);
    });
    svg.append(s("text", {x: left, y: H - 4, "font-size": 9, fill: "#667085"}, "60 min ago"));
    svg.append(s("text", {x: W - 2, y: H - 4, "font-size": 9, fill: "#667085", "text-anchor": "end"}, "now"));
    const legend = s("g", {}, s("rect", {x: left + 4, y: 2, width: 8, height: 8, fill: "#12b76a"}),
      s("text", {x: left + 16, y: 10, "font-size": 10, fill: "#344054"}, okLabel),
      s("rect", {x: left + 90, y: 2, width: 8, height: 8, fill: "#f04438"}),
      s("text", {x: left + 102, y: 10, "font-size": 10, fill: "#344054"}, failLabel));
    svg.append(legend);
    return svg;
  }

  function renderQueues(el, ov) {
    const names = Object.keys(ov.jobs.by_queue).sort();
    const paused = {};
    for (const q of ov.queues) paused[q.name] = q.paused;
    const count = (q, st, n) => n ? h("a", {href: "#/jobs" + braid.qs({queue: q, status: st})}, String(n)) : h("span", {class: "muted"}, "0");
    const rows = names.map(q => {
      const by = ov.jobs.by_queue[q];
      const total = JOB_STATES.reduce((t, st) => t + (by[st] || 0), 0);
      const deep = (by.available || 0) > ov.thresholds.queue_depth;
      return {
        attrs: {"data-queue": q, class: deep ? "deep" : null},
        cells: [
          h("span", {}, h("a", {href: "#/jobs" + braid.qs({queue: q})}, q), paused[q] ? [" ", h("span", {class: "status s-waiting"}, "paused")] : null),
          ...JOB_STATES.map(st => count(q, st, by[st] || 0)),
          String(total),
        ],
      };
    });
    const totals = {cells: [h("strong", {}, "all queues"), ...JOB_STATES.map(st => h("strong", {}, String(ov.jobs.by_state[st] || 0))),
      h("strong", {}, String(ov.jobs.total))]};
    el.replaceChildren(braid.table(["Queue", ...JOB_STATES, "total"], names.length ? rows.concat([totals]) : [], {id: "overview-queues"}));
  }

  function renderRuns(el, ov) {
    el.replaceChildren(braid.table(RUN_STATUSES.concat(["total"]), [{cells: [
      ...RUN_STATUSES.map(st => h("a", {href: "#/runs" + braid.qs({status: st}), title: "runs " + st}, status(st), " ", String(ov.runs.by_status[st] || 0))),
      String(ov.runs.total),
    ]}], {id: "overview-runs"}));
  }

  function renderLeases(el, ov) {
    el.replaceChildren(braid.table(["Lease", "Holder", "Generation", "Expires"], ov.leases.map(l => ({
      attrs: {"data-lease": l.name},
      cells: [
        h("code", {}, l.name),
        l.expired ? h("span", {class: "muted", title: "expired: nobody holds it; last holder " + l.holder}, "nobody (" + l.holder + ")") : h("code", {}, l.holder),
        String(l.generation),
        l.expired ? h("span", {class: "status s-discarded"}, "expired") : h("span", {title: fmt.time(l.expires_at)}, "in " + fmt.seconds(Math.max(0, l.expires_in_seconds))),
      ],
    })), {id: "overview-leases"}), h("p", {class: "muted"}, h("a", {href: "#/leases"}, "Leases and queues →")));
  }

  braid.page("/", async (params, main) => {
    const alerts = h("ul", {class: "alerts", id: "alerts"});
    const cards = h("div", {class: "cards", id: "overview-cards"});
    const jobsChart = h("div", {class: "card", id: "overview-jobs-chart"});
    const runsChart = h("div", {class: "card", id: "overview-runs-chart"});
    const queues = h("div", {id: "overview-queues-box"});
    const runs = h("div", {id: "overview-runs-box"});
    const leases = h("div", {id: "overview-leases-box"});
    const clock = h("span", {class: "muted", id: "overview-clock"});
    clock.style.fontSize = ".8rem";
    clock.style.fontWeight = "normal";
    const charts = h("div", {class: "charts"}, jobsChart, runsChart);
    Object.assign(charts.style, {display: "grid", gridTemplateColumns: "repeat(auto-fit, minmax(340px, 1fr))", gap: ".8rem", marginBottom: "1rem"});
    main.append(
      h("h1", {}, "Overview ", clock),
      alerts, cards,
      h("h2", {}, "Throughput and failures, last hour"),
      charts,
      h("h2", {}, "Jobs by state and queue"), queues,
      h("h2", {}, "Runs by status"), runs,
      h("h2", {}, "Lease holders"), leases);

    async function refresh() {
      const ov = await api("GET", "/api/admin/overview");
      clock.textContent = "· database time " + fmt.time(ov.now);
      renderAlerts(alerts, ov.alerts);
      renderCards(cards, ov);
      jobsChart.replaceChildren(h("div", {class: "l"}, "River jobs finished per minute"),
        chart(ov.throughput, "completed", "discarded", "completed", "discarded", "chart-jobs"));
      runsChart.replaceChildren(h("div", {class: "l"}, "Workflow runs finished per minute"),
        chart(ov.throughput, "runs_completed", "runs_failed", "completed", "failed", "chart-runs"));
      renderQueues(queues, ov);
      renderRuns(runs, ov);
      renderLeases(leases, ov);
    }
    await refresh();
    // Whole-table counts: every five seconds is live enough.
    return {refresh, every: 5};
  }, "overview");
})();
