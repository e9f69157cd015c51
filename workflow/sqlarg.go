package workflow

import "github.com/google/uuid"

// pgIDs returns ids as pgx encodes them cheaply. A uuid.UUID is a
// driver.Valuer, so pgx encodes it by formatting it as text and parsing
// that back, about twenty times the work of copying the [16]byte it is.
// The statements that every turn sends pass their IDs through pgIDs.
func pgIDs(ids []uuid.UUID) [][16]byte {
	out := make([][16]byte, len(ids))
	for i, id := range ids {
		out[i] = id
	}
	return out
}
