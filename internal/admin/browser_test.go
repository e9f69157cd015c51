package admin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/riverqueue/river"

	"github.com/braidflow/braid/queue"
	"github.com/braidflow/braid/workflow"
)

// EnvChromium names the Chrome or Chromium binary of the browser test; by
// default it is looked up on PATH.
const EnvChromium = "BRAID_CHROMIUM"

// EnvScreenshots names the directory the browser test writes its
// screenshots to; by default a temporary one. `make screenshots` sets it to
// docs/screenshots.
const EnvScreenshots = "BRAID_SCREENSHOTS"

// chromium finds the browser, or fails the test saying what to install.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(EnvChromium); p != "" {
		if _, err := exec.LookPath(p); err != nil {
			t.Fatalf("%s=%s: %v", EnvChromium, p, err)
		}
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatalf("the browser test needs Chromium, and none is on PATH. Install it: as root on Debian/Ubuntu `apt-get install -y chromium` (make test does this itself when run as root), on Fedora `dnf install -y chromium`, on macOS `brew install --cask chromium`; or set %s to a Chrome or Chromium binary", EnvChromium)
	return ""
}

// exportArgs is a job that reports its progress step by step, so the test
// can watch the progress bar move.
type exportArgs struct {
	Steps int `json:"steps"`
}

func (exportArgs) Kind() string { return "browser_export" }

// TestDashboardInABrowser drives the dashboard in headless Chromium: it
// logs in with the token, watches a running job's progress bar advance with
// no reload, opens a failed run, sees the failed step and its error, clicks
// Retry, and sees the run complete. It writes screenshots of the overview,
// the run with its timeline, and the jobs page.
func TestDashboardInABrowser(t *testing.T) {
	t.Parallel()
	bin := chromium(t)
	shots := os.Getenv(EnvScreenshots)
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}

	f := newFixture(t, func(c *Config) { c.JaegerURL = "http://localhost:16686" })
	ctx := context.Background()

	// A job that advances its progress every 400 ms until released, however
	// long the browser takes to open its page: it exports its parts over
	// and over, each round up to 99%, and reaches 100% once released.
	var release atomic.Bool
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[exportArgs]) error {
		for i := 0; !release.Load(); i++ {
			part := i%job.Args.Steps + 1
			if err := queue.Progress(ctx, part*99/job.Args.Steps, fmt.Sprintf("exported %d of %d parts", part, job.Args.Steps)); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(400 * time.Millisecond):
			}
		}
		return queue.Progress(ctx, 100, fmt.Sprintf("exported %d of %d parts", job.Args.Steps, job.Args.Steps))
	}))

	// A workflow whose render step fails until the test mends it.
	var mended atomic.Bool
	archive := workflow.Define("archive_month", func(t *workflow.Task, month string) (string, error) { return month, nil })
	report := workflow.Define("monthly_report", func(t *workflow.Task, month string) (string, error) {
		workflow.Go(t, "archive", archive, month, workflow.Detached())
		rows, err := workflow.Step(t, "load", func(ctx context.Context) (int, error) { return 1200, nil })
		if err != nil {
			return "", err
		}
		return workflow.Step(t, "render", func(ctx context.Context) (string, error) {
			if !mended.Load() {
				return "", errors.New("render: template \"summary\" is missing")
			}
			return fmt.Sprintf("%s: %d rows", month, rows), nil
		})
	}, workflow.WithMaxAttempts(1))
	// A DAG whose condition skips its summary node.
	type article struct {
		Lang string `json:"lang"`
	}
	node := func(name string) *workflow.Workflow[article, string] {
		return workflow.Define(name, func(t *workflow.Task, in article) (string, error) { return name, nil })
	}
	fetchPage, summarize, indexPage := node("fetch_page"), node("summarize"), node("index_page")
	publish := workflow.DAG[article]("publish",
		workflow.Node("fetch", fetchPage),
		workflow.Node("summary", summarize, workflow.After("fetch"), workflow.When(`input.lang == "en"`)),
		workflow.Node("index", indexPage, workflow.After("fetch", "summary")),
	)
	eng, err := workflow.NewEngine(f.pool, &workflow.Config{
		Workflows: []workflow.Definition{report, archive, publish, fetchPage, summarize, indexPage},
		Queue:     &queue.Config{Workers: workers},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Stop(context.Background()) })

	run, err := report.Start(ctx, eng, "2026-10", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Result(ctx); err == nil {
		t.Fatal("the report run completed; it should fail at render")
	}
	dagRun, err := publish.Start(ctx, eng, article{Lang: "de"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dagRun.Result(ctx); err != nil {
		t.Fatalf("the DAG run: %v", err)
	}
	job, err := eng.Queue().Insert(ctx, exportArgs{Steps: 40}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer release.Store(true)

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.WindowSize(1400, 1000),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	defer cancelBrowser()
	// The first action starts the browser, on a context without a timeout
	// (a timeout there would stop the browser); every later step has one.
	if err := chromedp.Do(bctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start Chromium (%s): %v", bin, err)
	}

	shot := func(name string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			png, err := chromedp.FullScreenshot(100)(ctx, tg)
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(shots, name), png, 0o644)
		})
	}
	step := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, 45*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	read := func(what string, a chromedp.Action[string]) string {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, 45*time.Second)
		defer cancel()
		v, err := chromedp.Run(sctx, a)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return v
	}
	// live reads the text of the element that css selects on a page that
	// redraws itself while it is read: in one evaluation, so that a redraw
	// between finding the element and reading it cannot fail the read; ""
	// while it is not there.
	live := func(what, css string) string {
		t.Helper()
		return read(what, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%q) || {textContent: ""}).textContent`, css)))
	}
	mark := chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := chromedp.Evaluate[bool](`window.braidNoReload = "kept"; true`)(ctx, tg)
		return err
	})
	noReload := func(where string) {
		t.Helper()
		if m := read("check for a reload", chromedp.Evaluate[string](`window.braidNoReload || "gone"`)); m != "kept" {
			t.Fatalf("%s: the page reloaded", where)
		}
	}

	// Log in with the token.
	step("log in",
		chromedp.Navigate(f.http.URL+"/"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), adminSecret),
		chromedp.Click(chromedp.ID("login-submit")),
		chromedp.WaitVisible(chromedp.ID("alerts")),
	)
	step("overview", chromedp.Sleep(1500*time.Millisecond), shot("overview.png"))

	// The running job's progress bar advances with no reload.
	step("open the job", chromedp.Navigate(fmt.Sprintf("%s/#/jobs/%d", f.http.URL, job.Job.ID)), chromedp.WaitVisible(chromedp.ID("job-progress")), mark)
	percent := func() int {
		text := live("read the progress", "#job-progress-text")
		n, _ := strconv.Atoi(strings.TrimSuffix(strings.Fields(text + " 0")[0], "%"))
		return n
	}
	deadline := time.Now().Add(30 * time.Second)
	first := percent()
	for ; first == 0 && time.Now().Before(deadline); first = percent() {
		time.Sleep(100 * time.Millisecond)
	}
	later := percent()
	for ; later <= first && time.Now().Before(deadline); later = percent() {
		if later < first {
			first = later // a new round began: watch it advance from here
		}
		time.Sleep(100 * time.Millisecond)
	}
	if later <= first {
		t.Fatalf("the progress bar stayed at %d%%", first)
	}
	if w := read("read the bar", chromedp.Evaluate[string](`document.querySelector("#job-progress > div").style.width`)); w == "" || w == "0%" {
		t.Errorf("the progress bar's width is %q at %d%%", w, later)
	}
	noReload("job page")
	step("jobs page", chromedp.Navigate(f.http.URL+"/#/jobs"), chromedp.Sleep(1500*time.Millisecond), shot("jobs.png"))

	// The failed run shows its failed step and error; Retry completes it.
	step("open the run",
		chromedp.Navigate(fmt.Sprintf("%s/#/runs/%s", f.http.URL, run.ID)),
		chromedp.WaitVisible(chromedp.CSS(".step-failed")),
		mark,
	)
	stepErr := read("read the step error", chromedp.Text(chromedp.CSS(".step-error")))
	status := live("read the status", "#run-status")
	failedStep := read("read the failed step", chromedp.Evaluate[string](`document.querySelector(".step-failed").dataset.step`))
	if !strings.Contains(stepErr, `template "summary" is missing`) || strings.TrimSpace(status) != "failed" || failedStep != "render" {
		t.Fatalf("run page: status %q, failed step %q, step error %q; want failed in render", status, failedStep, stepErr)
	}
	step("run page", shot("run.png"))
	mended.Store(true)
	step("retry", chromedp.Click(chromedp.ID("run-retry")))
	deadline = time.Now().Add(60 * time.Second)
	for strings.TrimSpace(status) != "completed" && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		status = live("read the status", "#run-status")
	}
	if strings.TrimSpace(status) != "completed" {
		t.Fatalf("after Retry the run page shows %q, want completed", status)
	}
	// The detached child, started by the turn that completed, links to
	// its run.
	var archiveRun string
	if err := f.pool.QueryRow(ctx, `SELECT id::text FROM braid_runs WHERE workflow = 'archive_month'`).Scan(&archiveRun); err != nil {
		t.Fatal(err)
	}
	if href := read("read the detached child's link", chromedp.Evaluate[string](`document.querySelector('.step-row[data-step="archive"] .detached-run').getAttribute("href")`)); href != "#/runs/"+archiveRun {
		t.Errorf("the detached child's start links to %q; want its run %s", href, archiveRun)
	}
	noReload("run page")
	if !strings.Contains(f.auditLog(), run.ID) {
		t.Errorf("the retry from the dashboard was not audited with the run's ID")
	}

	// The DAG run's page draws its nodes layer by layer, each with its
	// status, and says why the skipped one was skipped.
	step("open the DAG run",
		chromedp.Navigate(fmt.Sprintf("%s/#/runs/%s", f.http.URL, dagRun.ID)),
		chromedp.WaitVisible(chromedp.CSS(`.dag [data-node="summary"] .skip-reason`)),
	)
	layers := read("read the DAG's layers", chromedp.Evaluate[string](`[...document.querySelectorAll(".dag .dag-layer")].map(l =>
		l.dataset.layer + ": " + [...l.querySelectorAll(".dag-node")].map(n => n.dataset.node + " " + n.dataset.status).join(", ")).join("; ")`))
	if want := "1: fetch completed; 2: summary skipped; 3: index completed"; layers != want {
		t.Errorf("the DAG's layers on the run page: %q; want %q", layers, want)
	}
	reason := read("read the skip reason", chromedp.Text(chromedp.CSS(`.dag [data-node="summary"] .skip-reason`)))
	deps := read("read the dependencies", chromedp.Text(chromedp.CSS(`.dag [data-node="index"] .dag-deps`)))
	if strings.TrimSpace(reason) != `condition false: input.lang == "en"` || strings.TrimSpace(deps) != "← fetch, summary" {
		t.Errorf("the skipped node's reason is %q and index's dependencies %q; want the false condition and ← fetch, summary", reason, deps)
	}
}
