//go:build !unix

package main

import "os"

// terminalSize returns zeros: the live view falls back to periodic lines.
func terminalSize(*os.File) (width, height int) { return 0, 0 }
