package reqbody

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// ReadAll reads every size exactly, across chunk boundaries and however
// the reader splits its reads, and refuses one byte past the limit.
func TestReadAll(t *testing.T) {
	g := NewGate(0, 0)
	readers := map[string]func(io.Reader) io.Reader{
		"whole":    func(r io.Reader) io.Reader { return r },
		"one byte": iotest.OneByteReader,
		"halves":   iotest.HalfReader,
		"data+EOF": iotest.DataErrReader,
	}
	for _, size := range []int{0, 1, chunkSize - 1, chunkSize, chunkSize + 1, 3*chunkSize + 5} {
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(rand.IntN(256))
		}
		for name, wrap := range readers {
			for _, limit := range []int64{int64(size), int64(size) + 1, int64(size) - 1} {
				if limit < 0 {
					continue
				}
				b, err := g.ReadAll(wrap(bytes.NewReader(data)), limit)
				if int64(size) > limit {
					if n, ok := TooLarge(err); !ok || n != limit {
						t.Errorf("%s, %d bytes, limit %d: %v, want too large", name, size, limit, err)
					}
					b.Free()
					continue
				}
				if err != nil || !bytes.Equal(b.Bytes(), data) || b.Len() != size {
					t.Errorf("%s, %d bytes, limit %d: %v, %d bytes read", name, size, limit, err, b.Len())
				}
				b.Free()
			}
		}
	}
}

// failReader fails the test that reads it.
type failReader struct{ t *testing.T }

func (f failReader) Read([]byte) (int, error) {
	f.t.Error("the body was read")
	return 0, io.EOF
}
func (f failReader) Close() error { return nil }

func TestAdmit(t *testing.T) {
	t.Run("a declared length over the cap is refused unread", func(t *testing.T) {
		g := NewGate(1<<20, time.Minute)
		r := httptest.NewRequest("POST", "/", nil)
		r.Body, r.ContentLength = failReader{t}, 1001
		_, done, err := g.Read(httptest.NewRecorder(), r, 1000)
		done()
		if n, ok := TooLarge(err); !ok || n != 1000 {
			t.Fatalf("%v, want too large (1000)", err)
		}
	})
	t.Run("an undeclared length over the cap is refused at the cap", func(t *testing.T) {
		g := NewGate(1<<20, time.Minute)
		r := httptest.NewRequest("POST", "/", io.MultiReader(strings.NewReader(strings.Repeat("a", 5000))))
		r.ContentLength = -1
		_, done, err := g.Read(httptest.NewRecorder(), r, 1000)
		done()
		if _, ok := TooLarge(err); !ok {
			t.Fatalf("%v, want too large", err)
		}
	})
	t.Run("a body holds its share until released", func(t *testing.T) {
		g := NewGate(1000, time.Minute)
		first := httptest.NewRequest("POST", "/", strings.NewReader(strings.Repeat("a", 600)))
		release, err := g.Admit(httptest.NewRecorder(), first, 1000)
		if err != nil {
			t.Fatal(err)
		}
		// 600 held: 600 more must wait, and gets in once they are given
		// back.
		admitted := make(chan error, 1)
		go func() {
			second := httptest.NewRequest("POST", "/", strings.NewReader(strings.Repeat("b", 600)))
			rel, err := g.Admit(httptest.NewRecorder(), second, 1000)
			rel()
			admitted <- err
		}()
		select {
		case err := <-admitted:
			t.Fatalf("admitted while the budget had no room: %v", err)
		default:
		}
		release()
		release() // twice is once
		if err := <-admitted; err != nil {
			t.Fatal(err)
		}
		if !g.sem.TryAcquire(1000) {
			t.Fatal("the budget was not given back whole")
		}
	})
	t.Run("no room within the wait is busy", func(t *testing.T) {
		g := NewGate(1000, time.Millisecond)
		hold, err := g.Admit(httptest.NewRecorder(), httptest.NewRequest("POST", "/", strings.NewReader(strings.Repeat("a", 900))), 1000)
		if err != nil {
			t.Fatalf("the first body, with room in the budget: %v", err)
		}
		defer hold()
		r := httptest.NewRequest("POST", "/", strings.NewReader("x"))
		r.ContentLength = -1 // weighs its cap
		_, err = g.Admit(httptest.NewRecorder(), r, 1000)
		if !errors.Is(err, ErrBusy) {
			t.Fatalf("%v, want ErrBusy", err)
		}
	})
	t.Run("a request that ends while it waits", func(t *testing.T) {
		g := NewGate(1000, time.Minute)
		hold, _ := g.Admit(httptest.NewRecorder(), httptest.NewRequest("POST", "/", strings.NewReader(strings.Repeat("a", 1000))), 1000)
		defer hold()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		r := httptest.NewRequestWithContext(ctx, "POST", "/", strings.NewReader("x"))
		_, err := g.Admit(httptest.NewRecorder(), r, 1000)
		if !errors.Is(err, context.Canceled) || errors.Is(err, ErrBusy) {
			t.Fatalf("%v, want the context's error", err)
		}
	})
	t.Run("no body holds nothing", func(t *testing.T) {
		g := NewGate(10, time.Millisecond)
		for _, r := range []*http.Request{httptest.NewRequest("GET", "/", nil), httptest.NewRequest("POST", "/", http.NoBody)} {
			b, done, err := g.Read(httptest.NewRecorder(), r, 1<<20)
			if err != nil || b.Len() != 0 {
				t.Fatalf("%v %d", err, b.Len())
			}
			done()
		}
	})
}
