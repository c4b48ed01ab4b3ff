package perfdhcp

import "math"

// Ladder is the rate search every server gets, the same steps for all: from
// start it doubles (halves) the rate while the runs pass (fail), until it
// has a passing and a failing rate, then bisects geometrically between the
// two until they are within a factor of res of each other. It is a pure
// function of the verdicts, so two servers that pass and fail at the same
// rates are asked the same rates, and the figure it yields has the same
// resolution for every server.
type Ladder struct {
	minRate, maxRate int
	factor           float64 // coarse step (2: doubling)
	res              float64 // stop when hi/lo <= res
	lo, hi           int     // highest passing, lowest failing rate; 0 unknown
	cur              int
}

func NewLadder(start, minRate, maxRate int, factor, res float64) *Ladder {
	return &Ladder{minRate: minRate, maxRate: maxRate, factor: factor, res: res,
		cur: max(minRate, min(maxRate, start))}
}

// Rate is the rate to try next.
func (l *Ladder) Rate() int { return l.cur }

// Record takes the verdict of a run at Rate() and reports whether the
// search goes on (Rate() is then the next rate to try).
func (l *Ladder) Record(pass bool) bool {
	r := l.cur
	if pass {
		l.lo = r
	} else {
		l.hi = r
	}
	switch {
	case l.hi == 0: // everything passed so far
		if r >= l.maxRate {
			return false
		}
		l.cur = min(l.maxRate, int(math.Round(float64(r)*l.factor)))
	case l.lo == 0: // everything failed so far
		if r <= l.minRate {
			return false
		}
		l.cur = max(l.minRate, int(math.Round(float64(r)/l.factor)))
	default:
		if float64(l.hi)/float64(l.lo) <= l.res {
			return false
		}
		next := int(math.Round(math.Sqrt(float64(l.lo) * float64(l.hi))))
		if next <= l.lo || next >= l.hi {
			return false
		}
		l.cur = next
	}
	return true
}
