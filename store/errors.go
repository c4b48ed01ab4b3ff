package store

import (
	"errors"
	"fmt"

	"rackd/store/kv"
)

// Code names a domain refusal. The strings are the API's error codes.
type Code string

// The domain refusals.
const (
	CodeNotFound           Code = "not_found"
	CodeConflict           Code = "conflict"
	CodeInvalidTransition  Code = "invalid_transition"
	CodeAllocated          Code = "allocated"
	CodeNoAvailableMachine Code = "no_available_machine"
	CodeInvalid            Code = "bad_request"
	CodeForbidden          Code = "forbidden"
	// CodeUnauthorized: a credential that proves nothing (phases.go).
	CodeUnauthorized Code = "unauthorized"
	// CodeIPInUse: the address is held by someone else (a reservation, a
	// machine, a live lease, a quarantined squatter).
	CodeIPInUse Code = "ip_in_use"
	// CodeNoSubnet: no managed subnet serves the address or link.
	CodeNoSubnet Code = "no_subnet"
	// CodeNak: a DHCP request that must be refused (DHCPNAK).
	CodeNak Code = "nak"
	// CodeExhausted: no free address left where one was asked for.
	CodeExhausted Code = "exhausted"
)

// Error is a refusal by a domain rule: the request was understood and the
// state of the rack says no. Nothing was written.
type Error struct {
	Code Code
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

func errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// CodeOf returns the domain code of err, or "" when err is not a domain
// refusal (an I/O failure, a closed store).
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// ErrClosed is returned by operations on a store that has been closed.
var ErrClosed = errors.New("store: closed")

// ErrReadOnly is returned by writes to a store opened with Options.ReadOnly.
var ErrReadOnly = errors.New("store: opened read-only")

// ErrFenced is returned by a write made with a kv.WithFence ctx whose
// fence no longer held at its commit: the leadership it relied on was
// lost, and nothing of it was written.
var ErrFenced = kv.ErrFenced

// ErrUnavailable is returned, wrapped with the engine's name, by an
// operation whose engine did not answer within Options.CommitTimeout (an
// etcd cluster without a quorum, or none of its members reachable). It is
// no refusal: nothing is known to be written, and writes resume once the
// cluster is back.
var ErrUnavailable = errors.New("store: the engine is unavailable")

// unavailable wraps an engine's failure as ErrUnavailable when it is one.
func (s *Store) unavailable(err error) error {
	if s.shared == nil || !s.shared.Unavailable(err) || errors.Is(err, ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %s did not answer within %v (has its cluster lost its quorum?); writes resume when the cluster is back: %w",
		ErrUnavailable, s.path, s.opts.CommitTimeout, err)
}
