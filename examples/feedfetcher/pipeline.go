package feedfetcher

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/braidflow/braid/queue"
	"github.com/braidflow/braid/workflow"
)

// The article pipeline: a DAG run per new entry.
const (
	// PipelineWorkflow is the name of the DAG that reads one new entry.
	PipelineWorkflow = "article_pipeline"

	// The names of its nodes. Each runs a workflow named after the DAG and
	// the node, such as "article_pipeline.fetch".
	NodeFetch    = "fetch"
	NodeExtract  = "extract"
	NodeLanguage = "language"
	NodeSummary  = "summary"
	NodeIndex    = "index"

	// SummaryCondition is the When condition of the summary node: the
	// detected language is one the reader wants. A summary node skipped by
	// it keeps the reason "condition false: " + SummaryCondition.
	SummaryCondition = `language.code in input.languages`

	// PageLimit caps the part of a page the fetch node keeps, in bytes, so
	// that its output stays far below braid's payload cap.
	PageLimit = 256 << 10
)

// LanguagesDefault are the languages the reader wants summaries in when
// Config.Languages is empty.
var LanguagesDefault = []string{"en"}

// PipelineInput is the input of an article pipeline run, and so of each of
// its nodes: one new entry, and the languages the reader wants summaries
// in. The languages travel in the input so that a run keeps those it
// started with.
type PipelineInput struct {
	EntryID int64  `json:"entry_id"`
	FeedID  int64  `json:"feed_id"`
	FeedURL string `json:"feed_url"`
	Title   string `json:"title"`
	Link    string `json:"link"`
	// Summary is the entry's own summary from the feed, which stands in
	// for the page when the page cannot be fetched.
	Summary   string   `json:"summary,omitempty"`
	Languages []string `json:"languages"`
}

// FetchOutput is the output of the fetch node: the entry's page, or, when
// the entry has no link or its page could not be fetched (Error says
// why), the entry's own summary as plain text (FromEntry).
type FetchOutput struct {
	Page
	FromEntry bool   `json:"from_entry,omitempty"`
	Error     string `json:"error,omitempty"`
}

// ExtractOutput is the output of the extract node: the page's main heading
// and its readable text, one line per block.
type ExtractOutput struct {
	Title string `json:"title"`
	Text  string `json:"text"`
	// Chars and Words measure Text.
	Chars int `json:"chars"`
	Words int `json:"words"`
}

// LanguageOutput is the output of the language node.
type LanguageOutput struct {
	// Code is the ISO 639-1 code of the detected language, or
	// LanguageUndetermined.
	Code string `json:"code"`
	// Hits counts the stop words of that language in the text, out of
	// Words.
	Hits  int `json:"hits"`
	Words int `json:"words"`
}

// SummaryOutput is the output of the summary node: the text's most
// representative sentences.
type SummaryOutput struct {
	Text string `json:"text"`
}

// IndexOutput is the output of the index node, the DAG's sink.
type IndexOutput struct {
	ArticleID  int64  `json:"article_id"`
	Language   string `json:"language"`
	Chars      int    `json:"chars"`
	Summarized bool   `json:"summarized"`
	// AlreadyIndexed is true when the store step found the entry indexed
	// already, and so wrote nothing.
	AlreadyIndexed bool `json:"already_indexed,omitempty"`
}

// pipeline holds the article pipeline's DAG and its nodes, whose handles
// the nodes use to read their dependencies' outputs.
type pipeline struct {
	dag      *workflow.Workflow[PipelineInput, workflow.DAGResult]
	fetch    *workflow.NodeRef[FetchOutput]
	extract  *workflow.NodeRef[ExtractOutput]
	language *workflow.NodeRef[LanguageOutput]
	summary  *workflow.NodeRef[SummaryOutput]
	index    *workflow.NodeRef[IndexOutput]
}

// definePipeline declares the article pipeline, and returns the DAG and
// its nodes' workflows for the engine to register. fetch, then extract;
// then language, and summary after it, When the language is one the
// reader wants (its condition reads language's output, so it depends on
// language); then index, which reads extract, language and the summary if
// there is one:
//
//	fetch → extract → language → summary?
//	           └─────────┴──────────┴──→ index
func (a *App) definePipeline() []workflow.Definition {
	name := func(node string) string { return PipelineWorkflow + "." + node }
	fetchW := workflow.Define(name(NodeFetch), a.pipelineFetch, workflow.WithMaxAttempts(5))
	extractW := workflow.Define(name(NodeExtract), a.pipelineExtract)
	languageW := workflow.Define(name(NodeLanguage), a.pipelineLanguage)
	summaryW := workflow.Define(name(NodeSummary), a.pipelineSummary)
	indexW := workflow.Define(name(NodeIndex), a.pipelineIndex, workflow.WithMaxAttempts(10))

	p := &a.pipe
	p.fetch = workflow.Node(NodeFetch, fetchW)
	p.extract = workflow.Node(NodeExtract, extractW, workflow.After(NodeFetch))
	p.language = workflow.Node(NodeLanguage, languageW, workflow.After(NodeExtract))
	p.summary = workflow.Node(NodeSummary, summaryW, workflow.After(NodeExtract, NodeLanguage),
		workflow.When(SummaryCondition))
	p.index = workflow.Node(NodeIndex, indexW, workflow.After(NodeExtract, NodeLanguage, NodeSummary))
	p.dag = workflow.DAG[PipelineInput](PipelineWorkflow, p.fetch, p.extract, p.language, p.summary, p.index)
	return []workflow.Definition{p.dag, fetchW, extractW, languageW, summaryW, indexW}
}

// pipelineFetch is the fetch node. The page is fetched in a step with its
// own retry policy, as a digest's fetch_article does; once its attempts
// are spent, the entry's own summary stands in for the page, so that the
// entry is still read and indexed.
func (a *App) pipelineFetch(t *workflow.Task, in PipelineInput) (FetchOutput, error) {
	fromEntry := func(reason string) FetchOutput {
		return FetchOutput{
			Page:      Page{URL: in.Link, ContentType: "text/plain", Body: in.Summary, Bytes: len(in.Summary)},
			FromEntry: true,
			Error:     reason,
		}
	}
	if in.Link == "" {
		return fromEntry("the entry has no link"), nil
	}
	retry := workflow.Retry{
		MaxAttempts: a.cfg.ArticleAttempts,
		Backoff:     queue.Backoff{Base: a.cfg.ArticleRetryBase, Max: 8 * a.cfg.ArticleRetryBase, Jitter: 0.2},
	}
	page, err := workflow.Step(t, "get", func(ctx context.Context) (Page, error) {
		return a.fetcher.FetchPage(ctx, in.Link, PageLimit)
	}, retry)
	if se, ok := errors.AsType[*workflow.StepError](err); ok {
		return fromEntry(se.Message), nil
	}
	if err != nil {
		return FetchOutput{}, err
	}
	return FetchOutput{Page: page}, nil
}

// pipelineExtract is the extract node: the plain text of the fetched page
// (or of the entry's summary that stands in for it).
func (a *App) pipelineExtract(t *workflow.Task, in PipelineInput) (ExtractOutput, error) {
	page, err := a.pipe.fetch.Output(t)
	if err != nil {
		return ExtractOutput{}, err
	}
	var out ExtractOutput
	if page.ContentType == "" || strings.Contains(page.ContentType, "html") {
		out.Title, out.Text = extractText([]byte(page.Body))
	} else {
		out.Text = clipLines(strings.TrimSpace(page.Body), TextLimit)
	}
	out.Title = cmp.Or(in.Title, out.Title)
	out.Chars, out.Words = utf8.RuneCountInString(out.Text), len(words(out.Text))
	return out, nil
}

// pipelineLanguage is the language node: a stop-word count over the
// extracted text.
func (a *App) pipelineLanguage(t *workflow.Task, _ PipelineInput) (LanguageOutput, error) {
	text, err := a.pipe.extract.Output(t)
	if err != nil {
		return LanguageOutput{}, err
	}
	code, hits, n := detectLanguage(text.Text)
	return LanguageOutput{Code: code, Hits: hits, Words: n}, nil
}

// pipelineSummary is the summary node. It runs only when its condition,
// SummaryCondition, holds: the language node found a language the reader
// wants.
func (a *App) pipelineSummary(t *workflow.Task, _ PipelineInput) (SummaryOutput, error) {
	text, err := a.pipe.extract.Output(t)
	if err != nil {
		return SummaryOutput{}, err
	}
	lang, err := a.pipe.language.Output(t)
	if err != nil {
		return SummaryOutput{}, err
	}
	return SummaryOutput{Text: summarize(text.Text, lang.Code)}, nil
}

// pipelineIndex is the index node: it stores the article's row, with its
// summary when the summary node ran and none when it was skipped. The row
// is written in a step, once per entry: a store step that runs again
// finds it and writes nothing.
func (a *App) pipelineIndex(t *workflow.Task, in PipelineInput) (IndexOutput, error) {
	text, err := a.pipe.extract.Output(t)
	if err != nil {
		return IndexOutput{}, err
	}
	lang, err := a.pipe.language.Output(t)
	if err != nil {
		return IndexOutput{}, err
	}
	art := &IndexedArticle{
		EntryID: in.EntryID, FeedID: in.FeedID, RunID: t.RunID(), Title: text.Title,
		Chars: text.Chars, Words: text.Words, Language: lang.Code,
	}
	sum, err := a.pipe.summary.Output(t)
	switch {
	case err == nil:
		art.Summary = &sum.Text
	case !errors.Is(err, workflow.ErrNoOutput):
		return IndexOutput{}, err
	}
	return workflow.Step(t, "store", func(ctx context.Context) (IndexOutput, error) {
		got, inserted, err := insertArticle(ctx, a.pool, art)
		if err != nil {
			return IndexOutput{}, err
		}
		if inserted {
			summary := "skipped"
			if got.Summary != nil {
				summary = "written"
			}
			a.logger.InfoContext(ctx, "article indexed", slog.String("feed", in.FeedURL), slog.Int64("entry_id", in.EntryID),
				slog.String("language", got.Language), slog.String("summary", summary), slog.String("run_id", t.RunID()))
		}
		return IndexOutput{ArticleID: got.ID, Language: got.Language, Chars: got.Chars,
			Summarized: got.Summary != nil, AlreadyIndexed: !inserted}, nil
	})
}

// startPipelinesTx starts one article pipeline run per new entry of a
// feed, inside the transaction that stores the entries: the runs exist
// exactly when the entries do. Each run's idempotency key names its entry,
// so a fetch that is retried after its transaction committed cannot start
// a second pipeline for the same entry. Each run starts a trace of its own,
// linked to the fetch that found the entry.
func (a *App) startPipelinesTx(ctx context.Context, tx pgx.Tx, feed *Feed, fresh []StoredEntry) (int, error) {
	link := trace.LinkFromContext(ctx, attribute.String(workflow.LinkAttribute, "fetch that found the entry"))
	for _, e := range fresh {
		in := PipelineInput{EntryID: e.ID, FeedID: feed.ID, FeedURL: feed.URL, Title: e.Title, Link: e.Link,
			Summary: e.Summary, Languages: a.cfg.Languages}
		spanCtx, span := a.tracer.Start(ctx, "feedfetcher.article_pipeline", trace.WithNewRoot(), trace.WithLinks(link),
			trace.WithAttributes(attribute.Int64("feed.id", feed.ID), attribute.Int64("entry.id", e.ID)))
		run, err := a.pipe.dag.StartTx(spanCtx, tx, a.engine, in, &workflow.StartOpts{IdempotencyKey: pipelineKey(e.ID)})
		if err != nil {
			span.RecordError(err)
			span.End()
			return 0, fmt.Errorf("feedfetcher: starting the article pipeline of entry %d: %w", e.ID, err)
		}
		span.SetAttributes(attribute.String("run.id", run.ID))
		span.End()
	}
	return len(fresh), nil
}

// pipelineKey is the idempotency key of an entry's article pipeline run.
func pipelineKey(entryID int64) string { return fmt.Sprintf("%s:%d", PipelineWorkflow, entryID) }

// IndexedArticle is an entry as the article pipeline indexed it: one row
// per entry.
type IndexedArticle struct {
	ID      int64  `json:"id"`
	EntryID int64  `json:"entry_id"`
	FeedID  int64  `json:"feed_id"`
	RunID   string `json:"run_id"`
	Title   string `json:"title"`
	// Chars and Words measure the extracted text.
	Chars int `json:"chars"`
	Words int `json:"words"`
	// Language is the detected language's ISO 639-1 code, or
	// LanguageUndetermined.
	Language string `json:"language"`
	// Summary is nil when the summary node was skipped: the language was
	// not one the reader wants.
	Summary   *string   `json:"summary"`
	IndexedAt time.Time `json:"indexed_at"`
}

const articleColumns = `id, entry_id, feed_id, run_id, title, chars, words, language, summary, indexed_at`

func scanArticle(row pgx.Row) (*IndexedArticle, error) {
	var a IndexedArticle
	if err := row.Scan(&a.ID, &a.EntryID, &a.FeedID, &a.RunID, &a.Title, &a.Chars, &a.Words, &a.Language, &a.Summary, &a.IndexedAt); err != nil {
		return nil, err
	}
	return &a, nil
}

// insertArticle indexes an article, once per entry. When the entry is
// indexed already it returns that row and false.
func insertArticle(ctx context.Context, db dbtx, a *IndexedArticle) (*IndexedArticle, bool, error) {
	got, err := scanArticle(db.QueryRow(ctx, `
INSERT INTO articles (entry_id, feed_id, run_id, title, chars, words, language, summary)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (entry_id) DO NOTHING
RETURNING `+articleColumns, a.EntryID, a.FeedID, a.RunID, a.Title, a.Chars, a.Words, a.Language, a.Summary))
	if err == nil {
		return got, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, false, fmt.Errorf("feedfetcher: indexing entry %d: %w", a.EntryID, err)
	}
	got, err = scanArticle(db.QueryRow(ctx, `SELECT `+articleColumns+` FROM articles WHERE entry_id = $1`, a.EntryID))
	if err != nil {
		return nil, false, fmt.Errorf("feedfetcher: reading the article of entry %d: %w", a.EntryID, err)
	}
	return got, false, nil
}

// Articles returns the articles indexed for a feed, oldest first.
func (a *App) Articles(ctx context.Context, feedID int64) ([]*IndexedArticle, error) {
	rows, err := a.pool.Query(ctx, `SELECT `+articleColumns+` FROM articles WHERE feed_id = $1 ORDER BY id`, feedID)
	if err != nil {
		return nil, fmt.Errorf("feedfetcher: listing the articles of feed %d: %w", feedID, err)
	}
	arts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*IndexedArticle, error) { return scanArticle(row) })
	if err != nil {
		return nil, fmt.Errorf("feedfetcher: listing the articles of feed %d: %w", feedID, err)
	}
	return arts, nil
}

// ErrNoPipeline is returned for an entry that has no article pipeline run.
var ErrNoPipeline = errors.New("feedfetcher: the entry has no article pipeline run")

// PipelineRun returns the article pipeline run of an entry, with its
// nodes (workflow.TaskInfo.Node) and their skip reasons, or an error
// matching ErrNoPipeline.
func (a *App) PipelineRun(ctx context.Context, entryID int64) (*workflow.RunInfo, error) {
	runs, err := a.engine.ListRuns(ctx, workflow.RunFilter{Workflow: PipelineWorkflow, IdempotencyKey: pipelineKey(entryID), Limit: 1})
	if err != nil {
		return nil, fmt.Errorf("feedfetcher: finding the article pipeline of entry %d: %w", entryID, err)
	}
	if len(runs) == 0 {
		return nil, fmt.Errorf("%w: entry %d", ErrNoPipeline, entryID)
	}
	return a.engine.Run(ctx, runs[0].ID)
}
