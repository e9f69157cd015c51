package listen

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// RetryMin and RetryMax bound the pause before a Listener tries again to
// listen after it failed: the first failure of a streak waits RetryMin,
// each one after it twice as long as the one before, up to RetryMax.
const (
	RetryMin = time.Second
	RetryMax = 30 * time.Second
)

// closeTimeout bounds how long Close waits for the server to hear that a
// connection closes: a server that no longer answers must not hold up
// whoever closes it.
const closeTimeout = time.Second

// Open takes a connection from pool, removes it from the pool, and LISTENs
// on channels with it. The caller closes it with Close.
func Open(ctx context.Context, pool *pgxpool.Pool, channels ...string) (*pgx.Conn, error) {
	pc, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	conn := pc.Hijack()
	for _, channel := range channels {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
			Close(conn)
			return nil, err
		}
	}
	return conn, nil
}

// Close closes a connection that Open opened, waiting at most a second
// for the server to hear of it.
func Close(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	_ = conn.Close(ctx)
}

// Listener keeps a connection LISTENing on Channels until the context of
// Run ends, and opens it again whenever it cannot be opened or is lost.
type Listener struct {
	// Pool gives the connection (see Open).
	Pool *pgxpool.Pool
	// Logger logs the failures to listen: the first of a streak at WARN,
	// the others at DEBUG, and listening again after one at INFO, so that
	// a lasting failure neither floods the log nor goes unseen. Nil logs
	// nothing.
	Logger *slog.Logger
	// Subject and What name, in the log, who listens and for what: the
	// messages read "Subject: cannot listen for What; …".
	Subject, What string
	// Channels are the channels to LISTEN on.
	Channels []string
	// Ready, if set, is called each time the connection starts to listen:
	// notifications sent before then were lost, so whoever waits must
	// look again.
	Ready func()
	// Note is called on each notification, on Run's goroutine.
	Note func(*pgconn.Notification)
}

// Run listens until ctx ends. It returns once the connection is closed.
func (l *Listener) Run(ctx context.Context) {
	logger := l.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var pause time.Duration // zero while no failure is in a streak
	for ctx.Err() == nil {
		err := l.once(ctx, func() {
			if pause > 0 {
				logger.InfoContext(ctx, l.Subject+": listening for "+l.What+" again")
			}
			pause = 0
		})
		if ctx.Err() != nil {
			return
		}
		if pause == 0 {
			logger.WarnContext(ctx, l.Subject+": cannot listen for "+l.What+"; polling meanwhile", "error", err)
		} else {
			logger.DebugContext(ctx, l.Subject+": still cannot listen for "+l.What+"; polling meanwhile", "error", err)
		}
		pause = min(max(2*pause, RetryMin), RetryMax)
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
}

// once opens the connection, calls listening and then Ready once it
// listens, and listens until the connection fails, returning the error.
func (l *Listener) once(ctx context.Context, listening func()) error {
	conn, err := Open(ctx, l.Pool, l.Channels...)
	if err != nil {
		return err
	}
	defer Close(conn)
	listening()
	if l.Ready != nil {
		l.Ready()
	}
	for {
		note, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if l.Note != nil {
			l.Note(note)
		}
	}
}
