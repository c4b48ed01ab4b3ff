package agent

import (
	"net/netip"
	"sync"
	"time"
)

// rateLimiter is a token bucket per source address: each address may make
// rate requests a second on average and burst at once. It guards the
// unauthenticated metadata endpoints, where one misbehaving (or malicious)
// host must not be able to keep rackd's store busy.
type rateLimiter struct {
	rate, burst float64
	// max bounds the number of addresses tracked; beyond it, idle ones are
	// forgotten (a full bucket is the same as no bucket).
	max int
	now func() time.Time

	mu      sync.Mutex
	buckets map[netip.Addr]*tokenBucket
}

type tokenBucket struct {
	tokens float64
	last   time.Time
}

// newRateLimiter returns a limiter, or nil (allow everything) for rate 0.
func newRateLimiter(rate float64, burst int) *rateLimiter {
	if rate <= 0 {
		return nil
	}
	return &rateLimiter{rate: rate, burst: float64(burst), max: 1 << 16, now: time.Now,
		buckets: map[netip.Addr]*tokenBucket{}}
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
	b := l.buckets[addr]
	if b == nil {
		if len(l.buckets) >= l.max {
			l.forgetIdle(now)
		}
		b = &tokenBucket{tokens: l.burst, last: now}
		l.buckets[addr] = b
	}
	if elapsed := now.Sub(b.last); elapsed > 0 {
		b.tokens = min(l.burst, b.tokens+elapsed.Seconds()*l.rate)
		b.last = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
}

// forgetIdle drops the buckets that have refilled; if every address is
// busy, it drops them all rather than grow without bound (for a moment the
// limit is looser, never tighter).
func (l *rateLimiter) forgetIdle(now time.Time) {
	for a, b := range l.buckets {
		if b.tokens+now.Sub(b.last).Seconds()*l.rate >= l.burst {
			delete(l.buckets, a)
		}
	}
	if len(l.buckets) >= l.max {
		clear(l.buckets)
	}
}
