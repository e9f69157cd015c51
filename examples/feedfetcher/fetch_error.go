package feedfetcher

import (
	"errors"
	"fmt"
)

// Sentinel causes of a [FetchError]. Check them with errors.Is.
var (
	// ErrHTTPStatus means the server answered with a status other than 2xx
	// or 304. FetchError.Status holds the status code.
	ErrHTTPStatus = errors.New("unexpected HTTP status")
	// ErrMalformedFeed means the body is not an RSS, Atom or JSON feed that
	// the parser can read.
	ErrMalformedFeed = errors.New("malformed feed")
	// ErrTimeout means no complete response arrived within
	// FetcherConfig.Timeout.
	ErrTimeout = errors.New("timed out")
	// ErrResponseTooLarge means the body exceeds FetcherConfig.MaxBodyBytes.
	ErrResponseTooLarge = errors.New("response too large")
	// ErrInvalidURL means the URL cannot be fetched at all: it does not
	// parse, or its scheme is not http or https. Retrying will not help.
	ErrInvalidURL = errors.New("invalid URL")
)

// FetchError reports a failed fetch of a feed or an article page. Every
// error that [Fetcher.Fetch] and [Fetcher.FetchArticle] return is a
// *FetchError, so a caller can apply backoff and count consecutive failures
// without inspecting the cause. Err is one of the sentinel errors above, a
// network error, or the context's error when the caller's context ended.
type FetchError struct {
	// URL is the URL that was requested.
	URL string
	// Status is the HTTP status code received, or 0 when no response (or no
	// usable status) arrived.
	Status int
	// Err is the cause.
	Err error
}

// Error returns a one-line description naming the URL and the cause.
func (e *FetchError) Error() string {
	return fmt.Sprintf("feedfetcher: fetch %s: %v", e.URL, e.Err)
}

// Unwrap returns the cause, for errors.Is and errors.As.
func (e *FetchError) Unwrap() error { return e.Err }
