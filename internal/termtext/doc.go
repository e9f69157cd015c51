// Package termtext makes stored text safe to print on a terminal.
//
// The braid CLI and `braid check` print what workflows, jobs and their
// errors stored: text that anyone who can start a run or fail a job
// chooses. A terminal acts on the control characters in it (an escape
// sequence repaints the screen, a carriage return overwrites the line, a
// bidirectional override reorders what follows), so a table printed as it
// is could show what is not there.
//
// # Escaping
//
// [Cell] escapes, in Go's notation, every control character, the line and
// paragraph separators and the bidirectional controls of a table's cell;
// [Line] does the same for a line of free text, and keeps its tabs. Text
// without any of them comes back unchanged, and what --json prints is
// never escaped.
package termtext
