package agent

import (
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// rateLimiter is a token bucket per source address: each address may make
// rate requests a second on average and burst at once. It guards the
// unauthenticated metadata endpoints, where one misbehaving (or malicious)
// host must not be able to keep rackd's store busy.
type rateLimiter struct {
	rate  rate.Limit
	burst int
	// max bounds the number of addresses tracked; beyond it, idle ones are
	// forgotten (a full bucket is the same as no bucket).
	max int
	now func() time.Time

	mu       sync.Mutex
	limiters map[netip.Addr]*rate.Limiter
}

// newRateLimiter returns a limiter, or nil (allow everything) for rate 0.
func newRateLimiter(r float64, burst int) *rateLimiter {
	if r <= 0 {
		return nil
	}
	return &rateLimiter{rate: rate.Limit(r), burst: burst, max: 1 << 16, now: time.Now,
		limiters: map[netip.Addr]*rate.Limiter{}}
}

// allow takes a token for addr. When there is none it returns false and how
// long until there is one.
func (l *rateLimiter) allow(addr netip.Addr) (bool, time.Duration) {
	if l == nil {
		return true, 0
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	lim := l.limiters[addr]
	if lim == nil {
		if len(l.limiters) >= l.max {
			l.forgetIdle(now)
		}
		lim = rate.NewLimiter(l.rate, l.burst)
		l.limiters[addr] = lim
	}
	if lim.AllowN(now, 1) {
		return true, 0
	}
	// A refusal takes nothing, so the tokens now are what the next request
	// finds: the wait is the time the missing part of one takes to refill.
	missing := 1 - lim.TokensAt(now)
	return false, time.Duration(missing / float64(l.rate) * float64(time.Second))
}

// forgetIdle drops the limiters that have refilled; if every address is
// busy, it drops them all rather than grow without bound (for a moment the
// limit is looser, never tighter).
func (l *rateLimiter) forgetIdle(now time.Time) {
	for a, lim := range l.limiters {
		if lim.TokensAt(now) >= float64(l.burst) {
			delete(l.limiters, a)
		}
	}
	if len(l.limiters) >= l.max {
		clear(l.limiters)
	}
}
