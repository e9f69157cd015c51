// braid dashboard shell: API client, hash router, live updates and the
// small DOM helpers every page uses. Pages register themselves with
// braid.page(pattern, render) in their own files.
"use strict";

const braid = (() => {
  const pages = [];
  let current = null; // {refresh, onEvent} of the page on screen
  let config = {role: "read-only", who: "", alerts: {}};
  let source = null;
  let pollTimer = null;

  // h builds an element: h("a", {href: "#/"}, "text", child...). Attributes
  // starting with "on" are listeners; class, id, data-* and others are set
  // as attributes. Children may be strings, nodes, arrays, null or false.
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
      else if (k === "value") el.value = v;
      else el.setAttribute(k, v === true ? "" : String(v));
    }
    append(el, children);
    return el;
  }

  function append(el, children) {
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
  }

  // ApiError carries the server's JSON error.
  class ApiError extends Error {
    constructor(status, body) {
      super((body && body.error && body.error.message) || ("HTTP " + status));
      this.status = status;
      this.allowed = body && body.error && body.error.allowed;
    }
  }

  // api calls the JSON API with the token cookie. A 401 sends the
  // browser back to the login page.
  async function api(method, path, body) {
    const opts = {method, headers: {"Accept": "application/json", "X-Braid-Request": "1"}, credentials: "same-origin"};
    if (body !== undefined) {
      opts.headers["Content-Type"] = "application/json";
      opts.body = JSON.stringify(body);
    }
    const res = await fetch(path, opts);
    if (res.status === 401) {
      location.reload();
      throw new ApiError(401, null);
    }
    const text = await res.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
    if (!res.ok) throw new ApiError(res.status, data);
    return data;
  }

  // flash shows a message at the top of the page.
  function flash(message, kind) {
    const el = document.getElementById("flash");
    el.className = kind || "info";
    el.textContent = message;
    clearTimeout(flash.timer);
    flash.timer = setTimeout(() => { el.textContent = ""; el.className = ""; }, 6000);
  }

  // act runs an API mutation from a button, shows its outcome, and
  // refreshes the page.
  async function act(label, fn) {
    try {
      await fn();
      flash(label + ": done", "ok");
    } catch (e) {
      flash(label + ": " + e.message, "error");
    }
    refresh();
  }

  // page registers a page for a hash pattern such as "/runs/:id". render
  // is called with (params, main element, query) and may return
  // {refresh(), onEvent(ev), every}; refresh is called on run and schedule
  // events and on every tick, or every `every` ticks for a page whose
  // queries are heavy (an overview of whole tables); onEvent on every
  // event.
  function page(pattern, render, nav) {
    const names = [];
    const re = new RegExp("^" + pattern.replace(/:([a-z_]+)/g, (_, n) => { names.push(n); return "([^/]+)"; }) + "$");
    pages.push({re, names, render, nav});
  }

  async function route() {
    const hash = location.hash.replace(/^#/, "") || "/";
    const [path, qs] = hash.split("?");
    const query = new URLSearchParams(qs || "");
    const main = document.getElementById("main");
    for (const p of pages) {
      const m = path.match(p.re);
      if (!m) continue;
      const params = {};
      p.names.forEach((n, i) => params[n] = decodeURIComponent(m[i + 1]));
      document.querySelectorAll("#nav a").forEach(a => a.classList.toggle("active", a.dataset.nav === p.nav));
      main.replaceChildren();
      current = null;
      try {
        current = (await p.render(params, main, query)) || null;
      } catch (e) {
        main.replaceChildren(h("p", {class: "error"}, "Could not load this page: " + e.message));
      }
      return;
    }
    main.replaceChildren(h("h1", {}, "Not found"), h("p", {}, "No page at " + path + ". "), h("a", {href: "#/"}, "Overview"));
  }

  let ticks = 0;
  let refreshing = false;
  async function refresh() {
    if (!current || !current.refresh || refreshing) return;
    refreshing = true;
    try { await current.refresh(); } catch (e) { /* the next tick tries again */ }
    refreshing = false;
  }

  // live opens the event stream. While it is down, the page is polled every
  // two seconds instead.
  function live() {
    const dot = document.getElementById("live");
    const startPoll = () => {
      dot.className = "live down";
      dot.title = "live updates down: polling";
      if (!pollTimer) pollTimer = setInterval(refresh, 2000);
    };
    if (!window.EventSource) { startPoll(); return; }
    source = new EventSource("/api/events");
    source.onopen = () => {
      dot.className = "live up";
      dot.title = "live updates on";
      clearInterval(pollTimer);
      pollTimer = null;
    };
    source.onerror = startPoll;
    for (const type of ["run", "progress", "schedule", "tick"]) {
      source.addEventListener(type, (msg) => {
        let data = null;
        try { data = JSON.parse(msg.data); } catch (e) { return; }
        const ev = {type, data};
        if (current && current.onEvent) {
          try { current.onEvent(ev); } catch (e) { /* a page's handler never stops the stream */ }
        }
        if (type === "tick" && current && current.every > 1 && ++ticks % current.every !== 0) return;
        if (type === "tick" || type === "run" || type === "schedule") refresh();
      });
    }
  }

  async function start() {
    try {
      config = await api("GET", "/api/config");
    } catch (e) {
      document.getElementById("main").textContent = "Could not reach the server: " + e.message;
      return;
    }
    document.getElementById("who").textContent = config.who + " (" + config.role + ")";
    document.body.classList.toggle("readonly", config.role !== "admin");
    window.addEventListener("hashchange", route);
    await route();
    live();
  }

  // Formatting helpers.
  const fmt = {
    time(s) {
      if (!s) return "–";
      const d = new Date(s);
      return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
    },
    ago(s) {
      if (!s) return "–";
      const secs = (Date.now() - new Date(s).getTime()) / 1000;
      return fmt.seconds(Math.abs(secs)) + (secs >= 0 ? " ago" : " from now");
    },
    seconds(x) {
      if (x < 1) return Math.round(x * 1000) + " ms";
      if (x < 90) return x.toFixed(1) + " s";
      if (x < 5400) return Math.round(x / 60) + " min";
      if (x < 172800) return (x / 3600).toFixed(1) + " h";
      return (x / 86400).toFixed(1) + " d";
    },
    between(a, b) {
      if (!a) return "–";
      const end = b ? new Date(b) : new Date();
      return fmt.seconds((end - new Date(a)) / 1000) + (b ? "" : " so far");
    },
    json(v) {
      if (v === null || v === undefined) return "";
      return typeof v === "string" ? v : JSON.stringify(v, null, 2);
    },
  };

  // status renders a status as a coloured badge.
  function status(s) {
    return h("span", {class: "status s-" + s}, s);
  }

  // table renders rows under headers; cells are strings or nodes.
  function table(headers, rows, attrs) {
    return h("table", attrs || {},
      h("thead", {}, h("tr", {}, headers.map(x => h("th", {}, x)))),
      h("tbody", {}, rows.length ? rows.map(r => h("tr", r.attrs || {}, r.cells.map(c => h("td", {}, c))))
        : h("tr", {}, h("td", {colspan: headers.length, class: "empty"}, "nothing here"))));
  }

  // pager renders previous/next links for a list response and calls go
  // with the new offset.
  function pager(list, go) {
    const prev = list.offset > 0;
    const next = list.items.length === list.limit;
    return h("div", {class: "pager"},
      h("button", {disabled: !prev, onclick: () => go(Math.max(0, list.offset - list.limit))}, "← previous"),
      h("span", {}, list.items.length ? `${list.offset + 1}–${list.offset + list.items.length}` : "none"),
      h("button", {disabled: !next, onclick: () => go(list.offset + list.limit)}, "next →"));
  }

  // qs builds a query string from an object, leaving out empty values.
  function qs(obj) {
    const p = new URLSearchParams();
    for (const [k, v] of Object.entries(obj)) if (v !== "" && v !== null && v !== undefined) p.set(k, v);
    const s = p.toString();
    return s ? "?" + s : "";
  }

  return {h, api, ApiError, flash, act, page, start, fmt, status, table, pager, qs, refresh,
    get config() { return config; }, isAdmin: () => config.role === "admin"};
})();
