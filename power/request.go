package power

import "context"

type requestIDKey struct{}

// WithRequestID tells the driver (through ctx) which queued power request a
// command belongs to. Drivers may log it; the test driver records it so that
// a test can prove no request's cycle was executed twice across a crash.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestID is the request id WithRequestID put in ctx ("" when none).
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}
