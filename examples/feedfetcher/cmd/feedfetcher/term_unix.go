//go:build unix

package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// terminalSize returns the columns and rows of the terminal on f, or zeros
// when f is not a terminal.
func terminalSize(f *os.File) (width, height int) {
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0, 0
	}
	return int(ws.Col), int(ws.Row)
}
