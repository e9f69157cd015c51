package feedfetcher

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// User is a reader who subscribes to feeds.
type User struct {
	ID        int64     `json:"id"`
	Name      string    `json:"name"`
	Email     string    `json:"email,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// validateUserName checks a user name against the table's limits.
func validateUserName(name string) error {
	if n := utf8.RuneCountInString(name); strings.TrimSpace(name) == "" || n > UserNameMaxLength || !utf8.ValidString(name) {
		return fmt.Errorf("feedfetcher: user name %q must be 1 to %d characters of UTF-8, not blank", name, UserNameMaxLength)
	}
	return nil
}

// ensureUser creates the user named name, or returns the existing one
// (updating its email when a non-empty one is given).
func ensureUser(ctx context.Context, db dbtx, name, email string) (*User, error) {
	if err := validateUserName(name); err != nil {
		return nil, err
	}
	var u User
	err := db.QueryRow(ctx, `
INSERT INTO users (name, email) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE SET email = CASE WHEN excluded.email <> '' THEN excluded.email ELSE users.email END
RETURNING id, name, email, created_at`, name, email).Scan(&u.ID, &u.Name, &u.Email, &u.CreatedAt)
	if err != nil {
		return nil, fmt.Errorf("feedfetcher: ensuring user %q: %w", name, err)
	}
	return &u, nil
}

// userName returns the name of a user.
func userName(ctx context.Context, db dbtx, userID int64) (string, error) {
	var name string
	err := db.QueryRow(ctx, `SELECT name FROM users WHERE id = $1`, userID).Scan(&name)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("%w: id %d", ErrUserNotFound, userID)
	}
	return name, err
}
