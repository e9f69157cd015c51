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

// isLockNotAvailable reports whether err is PostgreSQL's
// lock_not_available (55P03): a NOWAIT lock that was held, or a lock
// timeout that passed.
func isLockNotAvailable(err error) bool { return sqlState(err) == "55P03" }

// sqlState is the SQLSTATE of the PostgreSQL error that err wraps, or ""
// when it wraps none.
func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// rowFault reports whether err, from a transaction that woke one delay or
// cancelled one run, is a fault of that row (a constraint, a trigger that
// raised, bad data) rather than of the database or the connection: only
// such a row is set aside. A lost connection, a deadlock or serialization
// failure, a held lock, a lack of resources (a full disk) or an operator's
// intervention (a shutdown, a statement timeout) would fail any row alike,
// and the row is tried again at the next tick.
func rowFault(err error) bool {
	code := sqlState(err)
	if len(code) < 2 {
		return false
	}
	switch code[:2] {
	case "08", "40", "53", "55", "57", "58":
		return false
	}
	return true
}
