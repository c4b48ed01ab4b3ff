package api

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// CreateToken is the body of POST /api/v1/tokens.
type CreateToken struct {
	Name string `json:"name"`
	// Expires is when the token stops working, as ParseExpiry reads it
	// ("30d", "12h", an RFC 3339 time); empty: never.
	Expires string `json:"expires,omitempty"`
	// User is whose token it is (an admin may name another user); empty:
	// the caller's.
	User string `json:"user,omitempty"`
}

// Token is an API token as the API shows it. Token (the secret) is only set
// in the answer that created it.
type Token struct {
	ID    string `json:"id"`
	User  string `json:"user"`
	Name  string `json:"name"`
	Token string `json:"token,omitempty"`
	// MAASKey is the token as a MAAS API key (consumer:token:secret, for
	// MAAS's API under /MAAS/api/2.0/), set with Token only.
	MAASKey  string     `json:"maas_api_key,omitempty"`
	Created  time.Time  `json:"created"`
	Expires  *time.Time `json:"expires,omitempty"`
	Expired  bool       `json:"expired"`
	LastUsed *time.Time `json:"last_used,omitempty"`
	// Current marks the token the request listing it was made with.
	Current bool `json:"current,omitempty"`
}

// AdminTokenRotation is the answer of POST /api/v1/admin-token/rotate.
type AdminTokenRotation struct {
	// File is where the server wrote the new admin token.
	File string `json:"file"`
	// Token is the new token, without its secret (it is in File only).
	Token Token `json:"token"`
	// Revoked lists the ids of the tokens it replaced.
	Revoked []string `json:"revoked"`
}

// MaxTokenLifetime bounds a relative expiry: beyond it, a token that never
// expires says what is meant more plainly.
const MaxTokenLifetime = 100 * 365 * 24 * time.Hour

// ParseExpiry reads when a token is to expire: a lifetime from now ("30d",
// "12h", "90m", "1d12h"; d is 24 hours) or a time (RFC 3339,
// "2027-01-31T00:00:00Z", or a date, "2027-01-31", meaning its midnight UTC).
// Empty means never (the zero time). A lifetime must be positive.
func ParseExpiry(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.UTC(), nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	d, err := parseLifetime(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("invalid expiry %q: want a lifetime such as 30d, 12h or 1d12h, or a time such as 2027-01-31 or 2027-01-31T12:00:00Z", s)
	}
	if d <= 0 {
		return time.Time{}, fmt.Errorf("invalid expiry %q: a lifetime must be positive", s)
	}
	if d > MaxTokenLifetime {
		return time.Time{}, fmt.Errorf("invalid expiry %q: at most 100 years (for a token that does not expire, give none)", s)
	}
	return now.Add(d).UTC(), nil
}

var errLifetime = errors.New("not a lifetime")

// parseLifetime is time.ParseDuration with a leading count of days.
func parseLifetime(s string) (time.Duration, error) {
	var days time.Duration
	if i := strings.IndexByte(s, 'd'); i >= 0 {
		n, err := strconv.ParseUint(s[:i], 10, 16) // caps days far above MaxTokenLifetime
		if err != nil {
			return 0, errLifetime
		}
		days = time.Duration(n) * 24 * time.Hour
		s = s[i+1:]
		if s == "" {
			return days, nil
		}
		if s[0] == '-' || s[0] == '+' {
			return 0, errLifetime // "1d-2h" is a typo, not a lifetime
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errLifetime
	}
	return days + d, nil
}
