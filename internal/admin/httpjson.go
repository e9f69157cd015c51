package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
)

// Error is the body of every error response:
//
//	{"error": {"status": 404, "message": "run 0190… not found"}}
type Error struct {
	Status  int    `json:"status"`
	Message string `json:"message"`
	// Allowed lists the acceptable values when the request asked for one
	// that is not, such as the status transitions a job can take.
	Allowed []string `json:"allowed,omitempty"`
}

// errorBody wraps an Error as the response body.
type errorBody struct {
	Error *Error `json:"error"`
}

// apiError is an error that knows its HTTP status.
type apiError struct{ body Error }

func (e *apiError) Error() string { return e.body.Message }

// errorf returns an error that is written with status and the message.
func errorf(status int, format string, args ...any) *apiError {
	return &apiError{body: Error{Status: status, Message: fmt.Sprintf(format, args...)}}
}

// apiErr maps an error from a handler to the error written to the client.
// An error without a status is a server fault: it is logged, and the client
// gets 500 with its message.
func (s *Server) apiErr(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return errorf(http.StatusRequestEntityTooLarge, "request body too large: the limit is %d bytes", mbe.Limit)
	}
	s.log.Error("admin: request failed", slog.String("error", err.Error()))
	return errorf(http.StatusInternalServerError, "%s", err.Error())
}

// writeError writes err as JSON.
func writeError(w http.ResponseWriter, _ *http.Request, err *apiError) {
	writeJSON(w, err.body.Status, errorBody{Error: &err.body})
}

// writeJSON writes v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// decode reads the request body as exactly one JSON value into v. Unknown
// fields, trailing data, a wrong type and an empty body are 400; a body over
// the limit is 413.
func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &mbe):
			return errorf(http.StatusRequestEntityTooLarge, "request body too large: the limit is %d bytes", mbe.Limit)
		case errors.Is(err, io.EOF):
			return errorf(http.StatusBadRequest, "empty request body: a JSON object is required")
		case errors.As(err, &se):
			return errorf(http.StatusBadRequest, "malformed JSON at byte %d: %v", se.Offset, err)
		case errors.As(err, &te):
			return errorf(http.StatusBadRequest, "field %q must be %s, not %s", te.Field, te.Type, te.Value)
		case errors.Is(err, io.ErrUnexpectedEOF):
			return errorf(http.StatusBadRequest, "malformed JSON: the body ends too early")
		default:
			return errorf(http.StatusBadRequest, "invalid JSON body: %v", err)
		}
	}
	if dec.More() {
		return errorf(http.StatusBadRequest, "invalid JSON body: more than one value")
	}
	if _, err := dec.Token(); err != io.EOF {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return errorf(http.StatusRequestEntityTooLarge, "request body too large: the limit is %d bytes", mbe.Limit)
		}
		return errorf(http.StatusBadRequest, "invalid JSON body: trailing data after the value")
	}
	return nil
}

// Paging limits.
const (
	LimitDefault = 100
	LimitMax     = 1000
)

// Page is the paging of a list response.
type Page struct {
	Limit  int `json:"limit"`
	Offset int `json:"offset"`
}

// List is the body of every list response.
type List[T any] struct {
	Items []T `json:"items"`
	Page
	// Total counts every item that matches the filters, when the route
	// counts them.
	Total *int64 `json:"total,omitempty"`
}

// newList returns a list response; it never encodes items as null.
func newList[T any](items []T, p Page) List[T] {
	if items == nil {
		items = []T{}
	}
	return List[T]{Items: items, Page: p}
}

// paging reads limit and offset from the query: limit 1 to LimitMax
// (default LimitDefault), offset 0 or more.
func paging(r *http.Request) (Page, error) {
	p := Page{Limit: LimitDefault}
	q := r.URL.Query()
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > LimitMax {
			return p, errorf(http.StatusBadRequest, "invalid limit %q: use an integer from 1 to %d", v, LimitMax)
		}
		p.Limit = n
	}
	if v := q.Get("offset"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return p, errorf(http.StatusBadRequest, "invalid offset %q: use an integer of 0 or more", v)
		}
		p.Offset = n
	}
	return p, nil
}

// pathID reads the path value name as a positive integer ID.
func pathID(r *http.Request, name string) (int64, error) {
	v := r.PathValue(name)
	id, err := strconv.ParseInt(v, 10, 64)
	if err != nil || id < 1 {
		return 0, errorf(http.StatusBadRequest, "invalid %s %q: a positive integer is required", name, v)
	}
	return id, nil
}

// unprocessable is a 422 that lists the acceptable values.
func unprocessable(allowed []string, format string, args ...any) *apiError {
	e := errorf(http.StatusUnprocessableEntity, format, args...)
	e.body.Allowed = allowed
	return e
}
