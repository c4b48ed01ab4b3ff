// Package reqbody reads HTTP request bodies within bounds, so that many
// large bodies at once cost a bounded amount of memory:
//
//   - each body has the cap of its route (the largest body that route
//     legitimately takes), and one that declares a larger length is refused
//     before a byte of it is read;
//   - all the bodies being read at once share a budget of bytes: a body
//     holds its declared length (or its route's cap, when it declares none)
//     of the budget while it is read and parsed, and one that does not find
//     room waits, a bounded time, then is refused as busy;
//   - a body read whole goes into chunks from a pool, so that refusing
//     body after body makes no garbage for the collector to catch up with.
package reqbody

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"
)

// ErrBusy is a body that found no room in the budget within the wait: the
// request is to be answered 503, to be retried.
var ErrBusy = errors.New("rackd is reading as many request bodies as it takes at once: retry in a moment")

// Defaults of NewGate.
const (
	// DefaultBudget is the bytes of request bodies read at once. A body
	// that declares its length weighs it (an API request, a few hundred
	// bytes); one that does not weighs its route's cap (64 KiB for most,
	// 2.4 MiB for a deploy's).
	DefaultBudget = 4 << 20
	// DefaultWait is how long a body waits for room in the budget.
	DefaultWait = 10 * time.Second
)

// Gate is a budget of request-body bytes read at once, and the pool of
// buffers they are read into. One Gate serves a whole process.
type Gate struct {
	budget int64
	wait   time.Duration
	sem    *semaphore.Weighted
	chunks sync.Pool // *chunk
}

// NewGate returns a gate of budget bytes whose bodies wait at most wait for
// room (DefaultBudget and DefaultWait when zero).
func NewGate(budget int64, wait time.Duration) *Gate {
	if budget <= 0 {
		budget = DefaultBudget
	}
	if wait <= 0 {
		wait = DefaultWait
	}
	return &Gate{budget: budget, wait: wait, sem: semaphore.NewWeighted(budget)}
}

// TooLarge reports whether err is a body over its cap (http.MaxBytesError),
// and the cap.
func TooLarge(err error) (limit int64, ok bool) {
	var me *http.MaxBytesError
	if errors.As(err, &me) {
		return me.Limit, true
	}
	return 0, false
}

// Admit readies r's body to be read under limit. A body that declares a
// length over limit is refused at once (an *http.MaxBytesError, before
// anything is read); otherwise r.Body is capped at limit (reading past it
// fails with an *http.MaxBytesError, and the server closes the connection
// after the answer) and the body's share of the budget is held until
// release is called: its declared length, or limit when it declares none.
// A body that finds no room within the gate's wait is ErrBusy; a request
// whose context ends while it waits gets the context's error.
func (g *Gate) Admit(w http.ResponseWriter, r *http.Request, limit int64) (release func(), err error) {
	if r.ContentLength > limit {
		return func() {}, &http.MaxBytesError{Limit: limit}
	}
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return func() {}, nil
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	n := limit
	if r.ContentLength > 0 {
		n = r.ContentLength
	}
	n = min(n, g.budget)
	// Room now is taken now: a context whose deadline has passed by the
	// time Acquire runs (a short wait on a loaded machine) is refused even
	// when the budget has room, so waiting is only for when it has none.
	if !g.sem.TryAcquire(n) {
		ctx, cancel := context.WithTimeout(r.Context(), g.wait)
		defer cancel()
		if err := g.sem.Acquire(ctx, n); err != nil {
			if r.Context().Err() != nil {
				return func() {}, fmt.Errorf("request body: %w", r.Context().Err())
			}
			return func() {}, ErrBusy
		}
	}
	var once sync.Once
	return func() { once.Do(func() { g.sem.Release(n) }) }, nil
}

// chunkSize is the size of the pooled chunks bodies are read into.
const chunkSize = 32 << 10

type chunk = [chunkSize]byte

// Body is a request body read whole, in chunks of the gate's pool.
type Body struct {
	g      *Gate
	chunks []*chunk
	n      int
	flat   []byte
}

// Len is the body's length.
func (b *Body) Len() int { return b.n }

// Bytes are the body's bytes, valid until Free: a chunk of the pool when
// the body fits in one, else a copy made once.
func (b *Body) Bytes() []byte {
	switch {
	case b.flat != nil:
		return b.flat
	case len(b.chunks) == 0:
		return nil
	case len(b.chunks) == 1:
		return b.chunks[0][:b.n]
	}
	b.flat = make([]byte, 0, b.n)
	for i, c := range b.chunks {
		b.flat = append(b.flat, c[:min(chunkSize, b.n-i*chunkSize)]...)
	}
	return b.flat
}

// Reader reads the body's bytes from its chunks (no copy); valid until
// Free.
func (b *Body) Reader() io.Reader {
	rs := make([]io.Reader, 0, len(b.chunks))
	for i, c := range b.chunks {
		rs = append(rs, bytes.NewReader(c[:min(chunkSize, b.n-i*chunkSize)]))
	}
	return io.MultiReader(rs...)
}

// Free gives the body's chunks back to the pool; Bytes must not be used
// after.
func (b *Body) Free() {
	if b == nil {
		return
	}
	for _, c := range b.chunks {
		b.g.chunks.Put(c)
	}
	b.chunks, b.flat, b.n = nil, nil, 0
}

// Read admits r's body under limit and reads it whole, holding its share
// of the budget until done is called, which also frees the body. The error
// is Admit's, or the read's (an *http.MaxBytesError past limit).
func (g *Gate) Read(w http.ResponseWriter, r *http.Request, limit int64) (body *Body, done func(), err error) {
	release, err := g.Admit(w, r, limit)
	if err != nil {
		return nil, release, err
	}
	b, err := g.ReadAll(r.Body, limit)
	done = func() {
		b.Free()
		release()
	}
	if err != nil {
		return nil, done, err
	}
	return b, done, nil
}

// ReadAll reads rd to its end into chunks of the pool, at most limit bytes
// (past it, an *http.MaxBytesError; a body capped by Admit fails there
// first). Refusing a body that is too large makes no garbage: its chunks
// go back to the pool. Free the body when done with it.
func (g *Gate) ReadAll(rd io.Reader, limit int64) (*Body, error) {
	b := &Body{g: g}
	if rd == nil {
		return b, nil
	}
	for {
		off := b.n % chunkSize
		if off == 0 {
			if int64(b.n) > limit {
				return b, &http.MaxBytesError{Limit: limit}
			}
			b.chunks = append(b.chunks, g.chunk())
		}
		c := b.chunks[len(b.chunks)-1]
		n, err := rd.Read(c[off:])
		b.n += n
		if int64(b.n) > limit {
			return b, &http.MaxBytesError{Limit: limit}
		}
		if errors.Is(err, io.EOF) {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

func (g *Gate) chunk() *chunk {
	if c, ok := g.chunks.Get().(*chunk); ok {
		return c
	}
	return new(chunk)
}
