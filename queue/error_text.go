package queue

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxErrorBytesDefault is the default cap on the text of an error that
// braid stores: a River attempt error, a task's or a step's error, a panic
// with its stack. Longer text is cut and marked as cut.
const MaxErrorBytesDefault = 64 << 10

// SanitizeErrorText makes error text safe to store: it removes NUL bytes
// (PostgreSQL's text and jsonb reject them), replaces invalid UTF-8, and
// cuts the text to at most limit bytes, ending it with a marker that says
// how many bytes were cut. A limit of zero or less means
// MaxErrorBytesDefault. Text that needs none of this is returned as it is,
// without copying.
//
// braid applies it once, where error text leaves user code for the
// database: in the queue's River pilot for every job's attempt errors, and
// in the workflow engine for task and step errors.
func SanitizeErrorText(s string, limit int) string {
	if limit <= 0 {
		limit = MaxErrorBytesDefault
	}
	if len(s) <= limit && strings.IndexByte(s, 0) < 0 && utf8.ValidString(s) {
		return s
	}
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "\uFFFD")
	if len(s) <= limit {
		return s
	}
	marker := fmt.Sprintf("… [%d bytes cut; the limit is %d]", len(s)-limit, limit)
	keep := max(limit-len(marker), 0)
	// Cut on a rune boundary.
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:keep] + marker
}

// printableError returns err, or, when err's Error method panics (a typed
// nil pointer wrapped as an error, say), an error whose text says so and
// which unwraps to err, so that errors.Is and errors.As still see what the
// worker returned. River's executor and WorkClaimed read an attempt's
// error text outside any recover: a panic there would kill the process
// and leave the job running.
func printableError(err error) (out error) {
	if err == nil {
		return nil
	}
	defer func() {
		if r := recover(); r != nil {
			out = &unprintableError{err: err, text: fmt.Sprintf("%T.Error() panicked: %v", err, r)}
		}
	}()
	_ = err.Error()
	return err
}

// unprintableError is an error whose own Error method panics, with the
// text printableError gave it.
type unprintableError struct {
	err  error
	text string
}

func (e *unprintableError) Error() string { return e.text }
func (e *unprintableError) Unwrap() error { return e.err }
