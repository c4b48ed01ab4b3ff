package httpboot

import (
	"io"
	"net/http"
)

// readFromSpy is a ResponseWriter with ReadFrom, like net/http's, that
// records the reader it is given.
type readFromSpy struct {
	http.ResponseWriter
	got *io.Reader
}

func (s *readFromSpy) ReadFrom(r io.Reader) (int64, error) {
	*s.got = r
	return io.Copy(s.ResponseWriter, r)
}
