package workflow

import (
	"errors"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// connectionLost reports whether err says that the connection to the
// database was lost or refused, or that the server is shutting down or
// not yet accepting connections (a restart, a failover, an operator's
// pg_terminate_backend), rather than anything about the statement: the
// same read on another connection may succeed.
func connectionLost(err error) bool {
	var ce *pgconn.ConnectError
	var ne net.Error
	switch code := sqlState(err); {
	case errors.As(err, &ce), errors.As(err, &ne), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return true
	case strings.HasPrefix(code, "08"), code == "57P01", code == "57P02", code == "57P03":
		return true
	}
	return pgconn.SafeToRetry(err)
}
