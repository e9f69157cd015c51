package feedfetcher

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/braidflow/braid/examples/feedfetcher/feedserver"
)

func TestDetectLanguage(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		text, want string
	}{
		{"The peloton let the gap grow to four minutes, and never closed it.", "en"},
		{"Il faut venir tôt, car les meilleurs paniers partent avant neuf heures.", "fr"},
		{"Wer früh aufbricht, ist vor den Gewittern wieder im Tal.", "de"},
		{"El mercado abre por la mañana y cierra cuando se acaba la fruta del día.", "es"},
		{"Il mercato apre la mattina e chiude quando finisce la frutta della giornata.", "it"},
		{"De markt gaat open in de ochtend en sluit als het fruit op is.", "nl"},
		{"", LanguageUndetermined},
		{"12 345 678", LanguageUndetermined},
		{"Kubernetes Postgres River", LanguageUndetermined},
	} {
		if got, _, _ := detectLanguage(tt.text); got != tt.want {
			t.Errorf("detectLanguage(%q) = %q, want %q", tt.text, got, tt.want)
		}
	}
}

func TestExtractText(t *testing.T) {
	t.Parallel()
	page := []byte(`<!DOCTYPE html><html><head><title>Head title</title><style>p { color: red }</style></head>
<body><nav>Home · About</nav><header>Site name</header>
<article><h1>The <em>real</em> title</h1><p class="byline">By Ann, today</p>
<p>First paragraph, with <a href="/x">a link</a>.</p><ul><li>One item</li></ul><script>var x = "<p>no</p>";</script>
<p>Second &amp; last paragraph.</p></article>
<footer>Copyright</footer></body></html>`)
	title, text := extractText(page)
	if title != "The real title" {
		t.Errorf("title = %q, want the first <h1>", title)
	}
	want := "By Ann, today\nFirst paragraph, with a link .\nOne item\nSecond & last paragraph."
	if text != want {
		t.Errorf("text =\n%q\nwant\n%q", text, want)
	}

	// Without an <article>, the body's text; without an <h1>, the <title>.
	title, text = extractText([]byte(`<html><head><title>Only the title</title></head><body><p>Body text.</p><footer>x</footer></body></html>`))
	if title != "Only the title" || text != "Body text." {
		t.Errorf("page without article: title %q, text %q", title, text)
	}

	long := []byte("<p>" + strings.Repeat("word ", TextLimit) + "</p>")
	if _, text := extractText(long); utf8.RuneCountInString(text) != TextLimit || !strings.HasSuffix(text, "…") {
		t.Errorf("long text has %d characters, want it cut to %d", utf8.RuneCountInString(text), TextLimit)
	}
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	// The two sentences about what the text is about win, in their order;
	// the byline and the aside do not.
	text := "By Ann, 2 January 2026\n" +
		"A worker takes a job from the queue.\n" +
		"Lunch at the office was good today.\n" +
		"The queue keeps every job until a worker has run the job."
	got := summarize(text, "en")
	want := "A worker takes a job from the queue. The queue keeps every job until a worker has run the job."
	if got != want {
		t.Errorf("summarize =\n%q\nwant\n%q", got, want)
	}
	// A sentence repeated is taken once.
	if got := summarize("Jobs wait in the queue. Jobs wait in the queue.\nJobs wait in the queue.", "en"); got != "Jobs wait in the queue." {
		t.Errorf("summary of a repeated sentence = %q", got)
	}
	long := strings.Repeat("word ", 100)
	if got := summarize(long+". "+long+"again.", "en"); utf8.RuneCountInString(got) != SummaryLimit || !strings.HasSuffix(got, "…") {
		t.Errorf("summary of %d characters, want it cut to SummaryLimit", utf8.RuneCountInString(got))
	}
	if got := summarize("", "en"); got != "" {
		t.Errorf("summary of nothing = %q", got)
	}
}

// TestPagesOfTheFeedServer reads an article page of every well-behaved
// feed of the feed server as the article pipeline does, and finds the
// language the feed is written in.
func TestPagesOfTheFeedServer(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	f, err := NewFetcher(FetcherConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.CloseIdleConnections()
	langs := map[string]bool{}
	for _, fi := range srv.Feeds() {
		if fi.Behavior != feedserver.BehaviorNormal {
			continue
		}
		es, err := srv.Entries(fi.Slug)
		if err != nil || len(es) == 0 {
			t.Fatalf("entries of %s: %d, %v", fi.Slug, len(es), err)
		}
		for _, e := range es {
			page, err := f.FetchPage(context.Background(), e.Link, PageLimit)
			if err != nil {
				t.Fatal(err)
			}
			title, text := extractText([]byte(page.Body))
			code, _, _ := detectLanguage(text)
			if title != e.Title || !strings.Contains(text, e.Summary) || code != fi.Language {
				t.Errorf("%s: title %q, language %q; want %q and %q, and the summary in the text:\n%s", e.Link, title, code, e.Title, fi.Language, text)
			}
			if s := summarize(text, code); s == "" || !strings.Contains(text, strings.TrimSuffix(s, "…")[:20]) {
				t.Errorf("%s: summary %q is not from the text", e.Link, s)
			}
		}
		langs[fi.Language] = true
	}
	if !langs["en"] || !langs["fr"] || !langs["de"] {
		t.Errorf("the feed server's languages are %v; want English, French and German", langs)
	}

	page, err := f.FetchPage(context.Background(), srv.FeedURL("night-sky"), 100)
	if err != nil {
		t.Fatal(err)
	}
	if !page.Truncated || len(page.Body) != 100 || page.Bytes <= 100 || page.Status != 200 {
		t.Errorf("page cut to 100 bytes: %+v", page)
	}
}
