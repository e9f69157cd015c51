// Package admin serves braid's admin HTTP API and its web dashboard, the
// operator surface behind `braid serve`.
//
// # Routes
//
// The JSON API lives under /api/ and is described by the OpenAPI document
// it serves at /api/openapi.json, generated from the same route table the
// server uses. Lists take limit (1 to 1000, default 100) and offset, and
// answer {"items": [...], "limit": n, "offset": n}. Errors are JSON too:
// {"error": {"status": 404, "message": "…"}}, with "allowed" listing the
// acceptable values when a request asks for one that is not.
//
// The dashboard is served at / from files embedded in the binary: plain
// HTML, CSS and JavaScript, with no build step.
//
// # Authentication
//
// Every route needs a token, the dashboard's assets included. An API client
// sends it as "Authorization: Bearer <token>"; a person logs in to the
// dashboard with it once, and the browser keeps it in an HttpOnly,
// SameSite=Strict cookie. A mutation authenticated by that cookie must also
// carry the X-Braid-Request header, which no page of another origin can
// send.
//
// There are two roles. A read-only token may call every GET route. An
// admin token may also change things: cancel, retry, dispatch, update.
// A request without a valid token gets 401, and a read-only token on a
// mutation gets 403. Every mutation writes an audit line to the logger:
// who (the token's name), what, and which IDs.
//
// New refuses a configuration without a token unless InsecureNoAuth is set,
// and InsecureNoAuth only on a loopback address.
//
// # Live updates
//
// GET /api/events is a Server-Sent Events stream. One LISTEN connection per
// server feeds every open stream from braid's NOTIFY channels: a run
// finished, a job reported progress, a schedule changed. It opens with the
// first stream and closes EventsLinger (5 s) after the last one ends, so
// that a page reload keeps it and a server nobody watches holds none. It
// is a connection of the server's pool, opened as the pool opens its own
// (hooks included) and opened again once lost (package listen, braid's one
// way of listening). A tick every second makes open pages
// refresh what no NOTIFY announces. When the stream is down, the dashboard
// polls instead.
//
// # What it acts through
//
// The server changes nothing by SQL of its own where a braid package has
// the operation: runs are cancelled and retried through workflow.Engine,
// jobs through queue.Queue and River, schedules and recurring jobs through
// scheduler.Scheduler. Unless given started ones, it builds these on the
// pool without starting them, so a server works no jobs.
package admin
