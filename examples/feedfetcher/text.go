package feedfetcher

import (
	"bytes"
	"cmp"
	"maps"
	"slices"
	"strings"
	"unicode"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// Limits of the article pipeline's text.
const (
	// TextLimit caps the plain text that extraction keeps of a page, in
	// characters.
	TextLimit = 20_000
	// SummaryLimit caps a summary, in characters.
	SummaryLimit = 300
	// summarySentences is how many sentences a summary takes at most.
	summarySentences = 2
)

// LanguageUndetermined is the code of a text whose language the detector
// cannot tell (ISO 639-2 "und").
const LanguageUndetermined = "und"

// stopWords are the most common words of each language the detector knows,
// by ISO 639-1 code. A word in several lists counts for each; the words that
// tell the languages apart decide.
var stopWords = map[string][]string{
	"en": {"the", "and", "of", "to", "a", "in", "is", "it", "that", "for", "on", "with", "as", "was", "at",
		"by", "be", "this", "are", "from", "or", "an", "but", "not", "you", "we", "they", "have", "has",
		"his", "her", "its", "our", "their", "were", "which", "will", "would", "there", "been", "into",
		"than", "then", "what", "when", "who", "how", "all", "more", "one", "no", "so", "if", "about",
		"after", "before", "out", "up", "your", "can", "just", "most", "any"},
	"fr": {"le", "la", "les", "de", "des", "du", "un", "une", "et", "est", "en", "que", "qui", "dans",
		"pour", "pas", "sur", "au", "aux", "avec", "ce", "cette", "ces", "il", "elle", "ils", "elles",
		"nous", "vous", "on", "se", "sa", "son", "ses", "leur", "leurs", "mais", "ou", "où", "par",
		"plus", "ne", "très", "sont", "été", "être", "car", "comme", "même", "d", "l", "qu", "n", "c"},
	"de": {"der", "die", "das", "und", "ist", "nicht", "ein", "eine", "einen", "einem", "einer", "den",
		"dem", "des", "zu", "mit", "von", "auf", "für", "im", "sich", "auch", "es", "wir", "sie", "er",
		"ich", "dass", "wie", "aber", "oder", "noch", "nach", "bei", "aus", "um", "wird", "werden",
		"wurde", "sind", "war", "hat", "haben", "zum", "zur", "am", "vom", "über", "unter", "nur",
		"schon", "wenn", "wer", "vor", "bis"},
	"es": {"el", "la", "los", "las", "de", "del", "y", "que", "en", "un", "una", "es", "por", "con",
		"para", "no", "se", "su", "sus", "al", "lo", "como", "más", "pero", "este", "esta", "son",
		"fue", "ha", "muy", "también", "cuando", "donde", "hay", "entre", "sin", "sobre"},
	"it": {"il", "lo", "la", "gli", "le", "di", "del", "della", "e", "che", "un", "una", "per", "con",
		"non", "è", "sono", "nel", "nella", "alla", "anche", "come", "più", "ma", "si", "questo",
		"questa", "dei", "delle", "al", "ha", "gli"},
	"nl": {"de", "het", "een", "en", "van", "is", "dat", "op", "te", "niet", "met", "voor", "zijn",
		"er", "die", "ook", "aan", "maar", "om", "bij", "nog", "wordt", "naar", "als", "dit", "wij",
		"ze", "hij", "geen", "heeft", "hebben"},
}

// stopSets are the stop words as sets.
var stopSets = func() map[string]map[string]bool {
	sets := make(map[string]map[string]bool, len(stopWords))
	for code, words := range stopWords {
		set := make(map[string]bool, len(words))
		for _, w := range words {
			set[w] = true
		}
		sets[code] = set
	}
	return sets
}()

// KnownLanguages returns the ISO 639-1 codes of the languages the article
// pipeline's detector knows, sorted.
func KnownLanguages() []string { return slices.Clone(knownLanguages) }

// knownLanguages are the keys of stopWords, sorted: the detector's order
// of precedence on a tie.
var knownLanguages = slices.Sorted(maps.Keys(stopWords))

// words splits text into lower-case words: runs of letters and digits.
// An apostrophe ends a word, so French "l'été" gives "l" and "été".
func words(text string) []string {
	return strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
}

// detectLanguage tells the language of text by counting the stop words of
// each language it knows: the language with the most wins, if it has at
// least two and more than any other. Otherwise the language is
// LanguageUndetermined. It returns the code, the winner's count of stop
// words and the number of words. The same text always gives the same
// answer.
func detectLanguage(text string) (code string, hits, total int) {
	ws := words(text)
	best, second := 0, 0
	code = LanguageUndetermined
	for _, c := range knownLanguages {
		n := 0
		for _, w := range ws {
			if stopSets[c][w] {
				n++
			}
		}
		switch {
		case n > best:
			code, best, second = c, n, best
		case n > second:
			second = n
		}
	}
	if best < 2 || best == second {
		return LanguageUndetermined, best, len(ws)
	}
	return code, best, len(ws)
}

// sentences splits text into sentences: at a line break, and after ".",
// "!" or "?" followed by white space.
func sentences(text string) []string {
	var out []string
	for line := range strings.Lines(text) {
		start := 0
		rs := []rune(line)
		for i, r := range rs {
			if (r == '.' || r == '!' || r == '?') && i+1 < len(rs) && unicode.IsSpace(rs[i+1]) {
				out = append(out, strings.TrimSpace(string(rs[start:i+1])))
				start = i + 1
			}
		}
		out = append(out, strings.TrimSpace(string(rs[start:])))
	}
	return slices.DeleteFunc(out, func(s string) bool { return s == "" })
}

// summarize picks the text's most representative sentences, at most
// summarySentences in their original order and SummaryLimit characters: a
// sentence scores the mean frequency, across the whole text, of its words
// that are not stop words of language. Sentences of fewer than four words
// (headings) do not compete, nor does a sentence met before.
func summarize(text, language string) string {
	stop := stopSets[language]
	content := func(s string) []string {
		return slices.DeleteFunc(words(s), func(w string) bool { return stop[w] || len([]rune(w)) < 3 })
	}
	freq := map[string]int{}
	for _, w := range content(text) {
		freq[w]++
	}
	type scored struct {
		i     int
		text  string
		score float64
	}
	var cands []scored
	seen := map[string]bool{}
	for i, s := range sentences(text) {
		cw := content(s)
		if len(words(s)) < 4 || len(cw) == 0 || seen[s] {
			continue
		}
		seen[s] = true
		sum := 0
		for _, w := range cw {
			sum += freq[w]
		}
		cands = append(cands, scored{i: i, text: s, score: float64(sum) / float64(len(cw))})
	}
	// Highest score first; the earlier sentence on a tie.
	slices.SortStableFunc(cands, func(a, b scored) int { return cmp.Compare(b.score, a.score) })
	cands = cands[:min(len(cands), summarySentences)]
	slices.SortFunc(cands, func(a, b scored) int { return cmp.Compare(a.i, b.i) })
	parts := make([]string, len(cands))
	for i, c := range cands {
		parts[i] = c.text
	}
	return clip(strings.Join(parts, " "), SummaryLimit)
}

// Elements whose text extraction leaves out, and elements that end a block
// of text.
var (
	skipped = map[atom.Atom]bool{atom.Script: true, atom.Style: true, atom.Noscript: true, atom.Template: true,
		atom.Nav: true, atom.Header: true, atom.Footer: true, atom.Aside: true,
		atom.Form: true, atom.Button: true, atom.Select: true, atom.Svg: true}
	blocks = map[atom.Atom]bool{atom.P: true, atom.Div: true, atom.Li: true, atom.Blockquote: true, atom.Pre: true,
		atom.H1: true, atom.H2: true, atom.H3: true, atom.H4: true, atom.H5: true, atom.H6: true, atom.Br: true,
		atom.Article: true, atom.Section: true, atom.Main: true, atom.Td: true, atom.Th: true, atom.Tr: true,
		atom.Dd: true, atom.Dt: true, atom.Figcaption: true, atom.Body: true}
)

// extractText returns the readable text of an HTML page as plain text,
// one line per block (paragraph, list item, subheading), and the page's
// main heading: its first <h1>, else its <title>, which the text leaves
// out. The text is that of the page's <article> elements when it has any,
// else that of its whole body, without scripts, styles, navigation,
// headers, footers and forms; it is cut to TextLimit characters.
func extractText(page []byte) (title, text string) {
	var (
		all, inArticle []string // blocks of the whole page, and of its articles
		cur            strings.Builder
		skip, article  int  // depth inside skipped elements, and inside <article>
		h1Done         bool // the first <h1> has been read
		inH1, inTitle  bool
		h1, headTitle  strings.Builder
	)
	flush := func() {
		if b := strings.Join(strings.Fields(cur.String()), " "); b != "" {
			all = append(all, b)
			if article > 0 {
				inArticle = append(inArticle, b)
			}
		}
		cur.Reset()
	}
	z := html.NewTokenizer(bytes.NewReader(page))
	for {
		tt := z.Next()
		if tt == html.ErrorToken {
			break
		}
		switch tt {
		case html.TextToken:
			switch {
			case inTitle:
				headTitle.Write(z.Text())
			case skip > 0:
			case inH1:
				h1.Write(z.Text())
			default:
				cur.Write(z.Text())
			}
		case html.StartTagToken, html.SelfClosingTagToken:
			name, _ := z.TagName()
			a := atom.Lookup(name)
			if blocks[a] {
				flush()
			} else {
				cur.WriteByte(' ')
			}
			if tt == html.SelfClosingTagToken {
				continue
			}
			switch {
			case a == atom.Title:
				inTitle = true
			case skipped[a]:
				skip++
			case a == atom.Article:
				article++
			case a == atom.H1 && !h1Done && skip == 0:
				inH1 = true
			}
		case html.EndTagToken:
			name, _ := z.TagName()
			a := atom.Lookup(name)
			if blocks[a] {
				flush()
			} else {
				cur.WriteByte(' ')
			}
			switch {
			case a == atom.Title:
				inTitle = false
			case skipped[a] && skip > 0:
				skip--
			case a == atom.Article && article > 0:
				article--
			case a == atom.H1 && inH1:
				inH1, h1Done = false, true
			}
		}
	}
	flush()
	body := all
	if len(inArticle) > 0 {
		body = inArticle
	}
	title = clip(cmp.Or(strings.TrimSpace(h1.String()), headTitle.String()), titleLimit)
	return title, clipLines(strings.Join(body, "\n"), TextLimit)
}

// clipLines cuts text to at most limit characters, keeping its line
// breaks, ending in "…" when cut.
func clipLines(text string, limit int) string {
	if r := []rune(text); len(r) > limit {
		return strings.TrimRight(string(r[:limit-1]), " \n") + "…"
	}
	return text
}
