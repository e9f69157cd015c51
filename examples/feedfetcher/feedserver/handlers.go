package feedserver

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"hash/fnv"
	"html/template"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// serveFeed answers a feed request according to the feed's behaviour.
func (s *Server) serveFeed(w http.ResponseWriter, r *http.Request) {
	slug := r.PathValue("slug")
	s.mu.Lock()
	fs, err := s.lockedFeed(slug)
	if err != nil {
		s.mu.Unlock()
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	behavior, format := fs.behavior, fs.format
	var body []byte
	switch behavior {
	case BehaviorFailing:
	case BehaviorMalformed:
		body = s.malformedDocument(fs)
	default:
		body, err = s.document(fs)
	}
	modified := fs.modified
	maxAge, expires := fs.maxAge, fs.expires
	s.mu.Unlock()

	switch behavior {
	case BehaviorFailing:
		http.Error(w, "500 Internal Server Error: the feed generator crashed", http.StatusInternalServerError)
		return
	case BehaviorSlow:
		t := time.NewTimer(s.cfg.SlowDelay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		case <-s.done:
			http.Error(w, "server closing", http.StatusServiceUnavailable)
			return
		}
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}

	// Date comes from the server's clock, like Expires, so that a client
	// reading Expires against Date sees exactly the feed's lifetime.
	now := s.cfg.Now()
	h := w.Header()
	h.Set("Date", now.UTC().Format(http.TimeFormat))
	h.Set("ETag", etag(body))
	h.Set("Last-Modified", modified.UTC().Format(http.TimeFormat))
	if maxAge > 0 {
		h.Set("Cache-Control", fmt.Sprintf("public, max-age=%d", int(maxAge/time.Second)))
	}
	if expires > 0 {
		h.Set("Expires", now.Add(expires).UTC().Format(http.TimeFormat))
	}
	if notModified(r, h.Get("ETag"), modified) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	if format == FormatAtom {
		h.Set("Content-Type", "application/atom+xml; charset=utf-8")
	} else {
		h.Set("Content-Type", "application/rss+xml; charset=utf-8")
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}

// etag returns a strong entity tag for a document.
func etag(body []byte) string {
	h := fnv.New64a()
	_, _ = h.Write(body)
	return fmt.Sprintf(`"%016x"`, h.Sum64())
}

// notModified reports whether a conditional GET may be answered 304, as RFC
// 9110 section 13.2.2 orders it: If-None-Match, when present, decides alone;
// otherwise If-Modified-Since is compared at one-second precision.
func notModified(r *http.Request, tag string, modified time.Time) bool {
	if inm := r.Header.Values("If-None-Match"); len(inm) > 0 {
		for _, v := range inm {
			for c := range strings.SplitSeq(v, ",") {
				c = strings.TrimSpace(c)
				if c == "*" || strings.TrimPrefix(c, "W/") == tag {
					return true
				}
			}
		}
		return false
	}
	ims, err := http.ParseTime(r.Header.Get("If-Modified-Since"))
	if err != nil {
		return false
	}
	return !modified.Truncate(time.Second).After(ims)
}

// window returns the feed's newest entries, newest first. The caller holds
// s.mu.
func (s *Server) window(fs *feedState) []Entry {
	es := fs.entries[max(0, len(fs.entries)-s.cfg.FeedWindow):]
	out := slices.Clone(es)
	slices.Reverse(out)
	return out
}

// document renders the feed in its format. The caller holds s.mu.
func (s *Server) document(fs *feedState) ([]byte, error) {
	var doc any
	if fs.format == FormatAtom {
		doc = s.atomDocument(fs)
	} else {
		doc = s.rssDocument(fs)
	}
	var buf bytes.Buffer
	buf.WriteString(xml.Header)
	enc := xml.NewEncoder(&buf)
	enc.Indent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("feedserver: render feed %q: %w", fs.slug, err)
	}
	buf.WriteByte('\n')
	return buf.Bytes(), nil
}

type rssDocument struct {
	XMLName xml.Name   `xml:"rss"`
	Version string     `xml:"version,attr"`
	AtomNS  string     `xml:"xmlns:atom,attr"`
	SyNS    string     `xml:"xmlns:sy,attr,omitempty"`
	Channel rssChannel `xml:"channel"`
}

type rssChannel struct {
	Title           string      `xml:"title"`
	Link            string      `xml:"link"`
	Description     string      `xml:"description"`
	Language        string      `xml:"language"`
	Generator       string      `xml:"generator"`
	Docs            string      `xml:"docs"`
	LastBuildDate   string      `xml:"lastBuildDate"`
	TTL             int         `xml:"ttl,omitempty"`
	UpdatePeriod    string      `xml:"sy:updatePeriod,omitempty"`
	UpdateFrequency int         `xml:"sy:updateFrequency,omitempty"`
	Self            rssAtomLink `xml:"atom:link"`
	Items           []rssItem   `xml:"item"`
}

type rssAtomLink struct {
	Href string `xml:"href,attr"`
	Rel  string `xml:"rel,attr"`
	Type string `xml:"type,attr"`
}

type rssItem struct {
	Title       string   `xml:"title"`
	Link        string   `xml:"link"`
	Description string   `xml:"description"`
	Author      string   `xml:"author,omitempty"`
	GUID        *rssGUID `xml:"guid,omitempty"`
	PubDate     string   `xml:"pubDate"`
}

type rssGUID struct {
	IsPermaLink string `xml:"isPermaLink,attr"`
	Value       string `xml:",chardata"`
}

func (s *Server) rssDocument(fs *feedState) rssDocument {
	ch := rssChannel{
		Title:         fs.title,
		Link:          s.url + "/",
		Description:   fs.about,
		Language:      fs.language(),
		LastBuildDate: fs.modified.UTC().Format(time.RFC1123Z),
		TTL:           int(fs.ttl / time.Minute),
		Self:          rssAtomLink{Href: s.FeedURL(fs.slug), Rel: "self", Type: "application/rss+xml"},
		Generator:     "braid feedserver",
		Docs:          "https://www.rssboard.org/rss-specification",
	}
	doc := rssDocument{Version: "2.0", AtomNS: "http://www.w3.org/2005/Atom"}
	if fs.syPeriod != "" {
		doc.SyNS = "http://purl.org/rss/1.0/modules/syndication/"
		ch.UpdatePeriod, ch.UpdateFrequency = fs.syPeriod, fs.syFrequency
	}
	for _, e := range s.window(fs) {
		it := rssItem{
			Title:       e.Title,
			Link:        e.Link,
			Description: e.Summary,
			Author:      fs.author,
			PubDate:     e.Published.UTC().Format(time.RFC1123Z),
		}
		if e.ID != "" {
			it.GUID = &rssGUID{IsPermaLink: "false", Value: e.ID}
		}
		ch.Items = append(ch.Items, it)
	}
	doc.Channel = ch
	return doc
}

type atomDocument struct {
	XMLName  xml.Name    `xml:"http://www.w3.org/2005/Atom feed"`
	Title    string      `xml:"title"`
	Subtitle string      `xml:"subtitle"`
	ID       string      `xml:"id"`
	Updated  string      `xml:"updated"`
	Links    []atomLink  `xml:"link"`
	Author   atomPerson  `xml:"author"`
	Entries  []atomEntry `xml:"entry"`
}

type atomLink struct {
	Href string `xml:"href,attr"`
	Rel  string `xml:"rel,attr,omitempty"`
	Type string `xml:"type,attr,omitempty"`
}

type atomPerson struct {
	Name string `xml:"name"`
}

type atomText struct {
	Type  string `xml:"type,attr"`
	Value string `xml:",chardata"`
}

type atomEntry struct {
	Title     string     `xml:"title"`
	ID        string     `xml:"id"`
	Link      atomLink   `xml:"link"`
	Published string     `xml:"published"`
	Updated   string     `xml:"updated"`
	Author    atomPerson `xml:"author"`
	Summary   atomText   `xml:"summary"`
}

func (s *Server) atomDocument(fs *feedState) atomDocument {
	doc := atomDocument{
		Title:    fs.title,
		Subtitle: fs.about,
		ID:       fmt.Sprintf("tag:feeds.example.org,2025:%s", fs.slug),
		Updated:  fs.modified.UTC().Format(time.RFC3339),
		Links: []atomLink{
			{Href: s.FeedURL(fs.slug), Rel: "self", Type: "application/atom+xml"},
			{Href: s.url + "/", Rel: "alternate", Type: "text/html"},
		},
		Author: atomPerson{Name: fs.author},
	}
	for _, e := range s.window(fs) {
		at := e.Published.UTC().Format(time.RFC3339)
		doc.Entries = append(doc.Entries, atomEntry{
			Title:     e.Title,
			ID:        e.ID,
			Link:      atomLink{Href: e.Link, Rel: "alternate", Type: "text/html"},
			Published: at,
			Updated:   at,
			Author:    atomPerson{Name: fs.author},
			Summary:   atomText{Type: "text", Value: e.Summary},
		})
	}
	return doc
}

// malformedDocument renders a document that starts like RSS and breaks off
// inside an element, the way a feed generator that crashed mid-write leaves
// it. No parser can recover an entry from it.
func (s *Server) malformedDocument(fs *feedState) []byte {
	return fmt.Appendf(nil, `<?xml version="1.0" encoding="UTF-8"?>
<rss version="2.0">
  <channel>
    <title>%s</title>
    <link>%s/</link>
    <description>%s</description>
    <item>
      <title>Half an entry</title>
      <link>%s/articles/%s/1</link>
      <description>The generator stopped writing here <b>and left this tag open
    </item>
    <item>
      <title>Cut off`, fs.title, s.url, fs.about, s.url, fs.slug)
}

var articleTemplate = template.Must(template.New("article").Parse(`<!DOCTYPE html>
<html lang="{{.Lang}}">
<head>
<meta charset="utf-8">
<title>{{.Entry.Title}} – {{.Feed}}</title>
<link rel="alternate" type="{{.FeedType}}" href="{{.FeedURL}}">
</head>
<body>
<article>
<h1>{{.Entry.Title}}</h1>
<p class="byline">{{.By}} {{.Author}}, <time datetime="{{.Entry.Published.Format "2006-01-02T15:04:05Z07:00"}}">{{.Entry.Published.Format "2 January 2006, 15:04 MST"}}</time></p>
<p class="summary">{{.Entry.Summary}}</p>
{{range .Paragraphs}}<p>{{.}}</p>
{{end}}</article>
<footer><a href="{{.FeedURL}}">{{.Feed}}</a></footer>
</body>
</html>
`))

// serveArticle answers with the HTML page of one entry.
func (s *Server) serveArticle(w http.ResponseWriter, r *http.Request) {
	slug := r.PathValue("slug")
	seq, err := strconv.Atoi(r.PathValue("seq"))
	s.mu.Lock()
	fs, ferr := s.lockedFeed(slug)
	var e Entry
	found := ferr == nil && err == nil && seq >= 1 && seq <= len(fs.entries)
	if found {
		e = fs.entries[seq-1]
	}
	s.mu.Unlock()
	if !found {
		http.Error(w, fmt.Sprintf("no article %q in feed %q", r.PathValue("seq"), slug), http.StatusNotFound)
		return
	}

	rng := s.rand(slug, -seq)
	paragraphs := make([]string, 3+rng.IntN(3))
	for i := range paragraphs {
		paragraphs[i] = strings.Join(pick(rng, fs.sentences, 3), " ")
	}
	feedType := "application/rss+xml"
	if fs.format == FormatAtom {
		feedType = "application/atom+xml"
	}
	author := fs.author
	if i := strings.Index(author, "("); i >= 0 {
		author = strings.TrimSuffix(author[i+1:], ")")
	}
	var buf bytes.Buffer
	err = articleTemplate.Execute(&buf, map[string]any{
		"Entry":      e,
		"Feed":       fs.title,
		"FeedURL":    s.FeedURL(slug),
		"FeedType":   feedType,
		"Author":     author,
		"Paragraphs": paragraphs,
		"Lang":       fs.language(),
		"By":         bylines[fs.language()],
	})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Last-Modified", e.Published.UTC().Format(http.TimeFormat))
	w.Header().Set("Cache-Control", "public, max-age=3600")
	_, _ = w.Write(buf.Bytes())
}

var indexTemplate = template.Must(template.New("index").Parse(`<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><title>braid sample feeds</title></head>
<body>
<h1>Sample feeds</h1>
<ul>
{{range .}}<li><a href="{{.URL}}">{{.Title}}</a> ({{.Format}}, {{.Behavior}})</li>
{{end}}</ul>
</body>
</html>
`))

// serveIndex lists the feeds.
func (s *Server) serveIndex(w http.ResponseWriter, r *http.Request) {
	var buf bytes.Buffer
	if err := indexTemplate.Execute(&buf, s.Feeds()); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(buf.Bytes())
}
