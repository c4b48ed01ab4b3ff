package files

import (
	"context"
	"net/netip"
)

type localAddrKey struct{}

// WithLocalAddr returns ctx carrying the server's own address that the
// request arrived at: the address the client sent it to. A Renderer reads
// it with LocalAddr, so that a config can point the client back at an
// address it reaches (the one it just used) when no fixed address is
// configured. An invalid addr leaves ctx as it is.
func WithLocalAddr(ctx context.Context, addr netip.Addr) context.Context {
	if !addr.IsValid() {
		return ctx
	}
	return context.WithValue(ctx, localAddrKey{}, addr.Unmap())
}

// LocalAddr returns the address WithLocalAddr put into ctx, and false when
// there is none.
func LocalAddr(ctx context.Context) (netip.Addr, bool) {
	a, ok := ctx.Value(localAddrKey{}).(netip.Addr)
	return a, ok
}
