package e2e

import (
	"context"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"rackd/internal/netnstest"
	rlab "rackd/lab"
)

// startRAs sends an IPv6 router advertisement on the bridge every second
// until the test ends (rlab.Advertise's, the one make lab's rack sends):
// iPXE waits about 12 s for one on a link without routers.
func startRAs(t *testing.T, ns *netnstest.NS, br string) {
	t.Helper()
	var fd int
	var ifi *net.Interface
	err := ns.Do(func() error {
		var err error
		if ifi, err = net.InterfaceByName(br); err != nil {
			return err
		}
		// The socket is made inside the namespace and stays there.
		fd, err = rlab.OpenRASocket(ifi)
		return err
	})
	if err != nil {
		t.Fatalf("router advertisements on %s: %v", br, err)
	}
	ra := rlab.RouterAdvertisement(ifi.HardwareAddr, labULA.Masked().Addr().As16())
	to := &unix.SockaddrInet6{Addr: [16]byte{0xff, 0x02, 15: 1}, ZoneId: uint32(ifi.Index)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			_ = unix.Sendto(fd, ra, 0, to)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		unix.Close(fd)
	})
}
