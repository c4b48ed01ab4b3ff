package files

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"
)

// File is one open boot file.
type File interface {
	io.ReadSeekCloser
	// Size is the file's length in bytes. TFTP announces it as tsize
	// (RFC 2349) and HTTP as Content-Length: firmware that is not told the
	// size ahead falls back to slow paths.
	Size() int64
	// ModTime is the last modification time, or the zero time for content
	// made on request (rendered configs), which then gets no Last-Modified.
	ModTime() time.Time
	// ETag is a strong entity tag, quotes included (RFC 9110 section
	// 8.8.3), that changes whenever the content does.
	ETag() string
}

// Source opens boot files by the name a client asked for. Implementations
// sanitise the name with Clean and return *Error for names that do not
// exist or are refused.
type Source interface {
	Open(ctx context.Context, name string) (File, error)
}

// Renderer makes files in memory, per request: the per-machine boot configs.
// Render is given a name already passed through Clean. It returns ok=false
// (and no error) for names it does not make, which then fall through to the
// next Source; an error means the name is its own but rendering failed.
type Renderer interface {
	Render(ctx context.Context, name string) (content []byte, ok bool, err error)
}

// The kinds of *Error. Compare with errors.Is.
var (
	// ErrNotFound: no such file, or not a regular file.
	ErrNotFound = errors.New("file not found")
	// ErrRefused: a name that tries to leave the tree ("..", an absolute
	// name, a symlink pointing outside) or that the file system denies.
	ErrRefused = errors.New("name refused")
	// ErrInvalid: a malformed name (NUL, control characters, backslash,
	// too long, not clean). Every invalid name is also refused:
	// errors.Is(err, ErrRefused) holds for it.
	ErrInvalid = errors.New("invalid name")
)

// Error is the error of a name that is not served.
type Error struct {
	// Name is the name as the client sent it.
	Name string
	// Kind is ErrNotFound, ErrRefused or ErrInvalid.
	Kind error
	// Reason says what was wrong, for logs ("parent directory element").
	Reason string
	// Err is the underlying file system error, if any.
	Err error
}

// Error says which name, what kind of failure, and why.
func (e *Error) Error() string {
	msg := fmt.Sprintf("files: %q: %v", e.Name, e.Kind)
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns Kind and, when set, Err.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// Is makes every invalid name match ErrRefused as well, and every
// not-found match fs.ErrNotExist, so callers that only care about
// "refused" or about the standard library's sentinel need one check.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrRefused:
		return e.Kind == ErrInvalid
	case fs.ErrNotExist:
		return e.Kind == ErrNotFound
	}
	return false
}

func notFound(name, reason string, err error) *Error {
	return &Error{Name: name, Kind: ErrNotFound, Reason: reason, Err: err}
}

func refused(name, reason string, err error) *Error {
	return &Error{Name: name, Kind: ErrRefused, Reason: reason, Err: err}
}

func invalid(name, reason string) *Error {
	return &Error{Name: name, Kind: ErrInvalid, Reason: reason}
}
