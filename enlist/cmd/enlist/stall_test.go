package main

import (
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestStallReader: the download's stall timer fires only when neither a
// read nor a disk write made progress for its timeout, and never once the
// body has been read to its end (the disk's final flush may take longer
// than the timeout on a loaded host: that is not a stalled download).
func TestStallReader(t *testing.T) {
	const d = time.Minute
	cases := []struct {
		name string
		run  func(s *stallReader)
		want bool
	}{
		{"no read at all", func(*stallReader) { time.Sleep(2 * d) }, true},
		{"reads keep it alive, then silence", func(s *stallReader) {
			buf := make([]byte, 1)
			for range 5 {
				time.Sleep(d / 2)
				s.Read(buf)
			}
			time.Sleep(2 * d)
		}, true},
		{"disk writes keep it alive while reads wait", func(s *stallReader) {
			for range 10 {
				time.Sleep(d / 2)
				s.Progress()
			}
		}, false},
		{"read to its end, then a long flush", func(s *stallReader) {
			io.Copy(io.Discard, s)
			s.Progress() // the last write's report comes after the end
			time.Sleep(10 * d)
		}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var fired atomic.Bool
				s := newStallReader(strings.NewReader("image"), d, func() { fired.Store(true) })
				c.run(s)
				synctest.Wait()
				if fired.Load() != c.want {
					t.Errorf("stall fired: %v, want %v", fired.Load(), c.want)
				}
				s.stop()
			})
		})
	}
}
