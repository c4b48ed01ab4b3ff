package arp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"rackd/internal/netnstest"
)

// fakeLink is a conn on a simulated link: hosts (IP → MAC) answer probes for
// their address like a Linux kernel does, after delay.
type fakeLink struct {
	hosts map[netip.Addr]net.HardwareAddr
	delay time.Duration

	mu     sync.Mutex
	probes map[netip.Addr]int // probes seen per target
	in     chan []byte
	closed chan struct{}
	once   sync.Once
}

func newFakeLink(hosts map[netip.Addr]net.HardwareAddr, delay time.Duration) *fakeLink {
	return &fakeLink{hosts: hosts, delay: delay, probes: map[netip.Addr]int{},
		in: make(chan []byte, 1024), closed: make(chan struct{})}
}

func (l *fakeLink) ReadFrom(b []byte) (int, net.Addr, error) {
	select {
	case p := <-l.in:
		return copy(b, p), nil, nil
	case <-l.closed:
		return 0, nil, net.ErrClosed
	}
}

func (l *fakeLink) WriteTo(b []byte, _ net.Addr) (int, error) {
	p, err := Parse(b)
	if err != nil {
		return 0, err
	}
	// Our own frame comes back to an AF_PACKET socket too.
	l.in <- append([]byte(nil), b...)
	l.mu.Lock()
	l.probes[p.TargetIP]++
	l.mu.Unlock()
	if mac, ok := l.hosts[p.TargetIP]; ok && p.SenderIP.IsUnspecified() {
		reply, _ := Packet{Op: OpReply, SenderMAC: mac, SenderIP: p.TargetIP, TargetMAC: p.SenderMAC, TargetIP: p.SenderIP}.Marshal()
		time.AfterFunc(l.delay, func() {
			select {
			case l.in <- reply:
			case <-l.closed:
			}
		})
	}
	return len(b), nil
}

func (l *fakeLink) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *fakeLink) probesFor(ip netip.Addr) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.probes[ip]
}

// The fake link's tests run in a synctest bubble: its answers come after
// their delay and probes time out on the bubble's clock, which moves only
// when every goroutine waits, so a loaded machine cannot make an answer
// late.

func TestProberAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		squat := netip.MustParseAddr("10.0.0.5")
		free := netip.MustParseAddr("10.0.0.6")
		link := newFakeLink(map[netip.Addr]net.HardwareAddr{squat: theirMAC}, time.Millisecond)
		p := newProber(link, ourMAC, Config{Timeout: 100 * time.Millisecond, Probes: 2})
		defer p.Close()
		ctx := context.Background()

		mac, inUse, err := p.Probe(ctx, squat)
		if err != nil || !inUse || mac.String() != theirMAC.String() {
			t.Fatalf("squatted: %v %v %v", mac, inUse, err)
		}
		start := time.Now()
		mac, inUse, err = p.Probe(ctx, free)
		if err != nil || inUse || mac != nil {
			t.Fatalf("free: %v %v %v", mac, inUse, err)
		}
		if d := time.Since(start); d != 100*time.Millisecond {
			t.Fatalf("free address answered after %v, want the 100ms timeout", d)
		}
		if n := link.probesFor(free); n != 2 {
			t.Fatalf("%d probes sent for a free address, want 2", n)
		}
	})
}

// TestProberConcurrent runs many probes at once on one socket: each gets
// its own answer, whatever order answers arrive in.
func TestProberConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hosts := map[netip.Addr]net.HardwareAddr{}
		for i := 1; i <= 100; i += 3 {
			hosts[netip.AddrFrom4([4]byte{10, 0, 0, byte(i)})] = net.HardwareAddr{2, 0, 0, 0, 1, byte(i)}
		}
		link := newFakeLink(hosts, 5*time.Millisecond)
		p := newProber(link, ourMAC, Config{Timeout: 150 * time.Millisecond})
		defer p.Close()

		var wg sync.WaitGroup
		errs := make(chan error, 200)
		for i := 1; i <= 200; i++ {
			ip := netip.AddrFrom4([4]byte{10, 0, 0, byte(i % 120)})
			wg.Go(func() {
				mac, inUse, err := p.Probe(context.Background(), ip)
				want, squatted := hosts[ip]
				switch {
				case err != nil:
					errs <- err
				case inUse != squatted:
					errs <- fmt.Errorf("%v: in use %v, want %v", ip, inUse, squatted)
				case squatted && mac.String() != want.String():
					errs <- fmt.Errorf("%v: answered by %v, want %v", ip, mac, want)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if len(p.waiters) != 0 {
			t.Fatalf("%d waiters left behind", len(p.waiters))
		}
	})
}

func TestProberContextAndClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		link := newFakeLink(nil, 0)
		p := newProber(link, ourMAC, Config{Timeout: 10 * time.Second})

		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if _, _, err := p.Probe(ctx, netip.MustParseAddr("10.0.0.9")); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want deadline exceeded", err)
		}

		errc := make(chan error, 1)
		go func() {
			_, _, err := p.Probe(context.Background(), netip.MustParseAddr("10.0.0.9"))
			errc <- err
		}()
		synctest.Wait() // the probe waits for an answer
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-errc:
			if !errors.Is(err, ErrClosed) {
				t.Fatalf("err = %v, want ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Probe did not return after Close")
		}
		if _, _, err := p.Probe(context.Background(), netip.MustParseAddr("10.0.0.9")); !errors.Is(err, ErrClosed) {
			t.Fatalf("after Close: err = %v, want ErrClosed", err)
		}
		if _, _, err := p.Probe(context.Background(), netip.MustParseAddr("fd00::1")); err == nil {
			t.Fatal("IPv6 probe accepted")
		}
	})
}

// TestProberNetns probes across a real veth pair: the squatter namespace
// holds addresses the kernel answers ARP for; free addresses get no answer.
func TestProberNetns(t *testing.T) {
	srv, squatter := netnstest.New(t), netnstest.New(t)
	ifSrv, ifSq := netnstest.Veth(t, srv, squatter)
	srv.AddAddr(ifSrv, netip.MustParsePrefix("10.251.0.1/24"))
	squatted := map[netip.Addr]bool{}
	for _, a := range []string{"10.251.0.5", "10.251.0.77", "10.251.0.200"} {
		squatter.AddAddr(ifSq, netip.PrefixFrom(netip.MustParseAddr(a), 24))
		squatted[netip.MustParseAddr(a)] = true
	}
	sqMAC := squatter.MAC(ifSq)

	var p *Prober
	if err := srv.Do(func() (err error) {
		p, err = Listen(ifSrv, Config{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	// The first probe also waits out the veth's carrier coming up.
	ctx := context.Background()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, inUse, err := p.Probe(ctx, netip.MustParseAddr("10.251.0.5"))
		if err != nil {
			t.Fatal(err)
		}
		if inUse {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("squatter never answered")
		}
	}

	// Every address of the /24 at once, on the one socket.
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	found := map[netip.Addr]string{}
	for i := 2; i < 255; i++ {
		ip := netip.AddrFrom4([4]byte{10, 251, 0, byte(i)})
		wg.Go(func() {
			mac, inUse, err := p.Probe(ctx, ip)
			if err != nil {
				t.Error(err)
				return
			}
			if inUse {
				mu.Lock()
				found[ip] = mac.String()
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(found) != len(squatted) {
		t.Errorf("found %v, want exactly %v", found, squatted)
	}
	for ip, mac := range found {
		if !squatted[ip] || mac != sqMAC.String() {
			t.Errorf("%v answered by %s; squatter is %v", ip, mac, sqMAC)
		}
	}
	t.Logf("253 concurrent probes in %v", time.Since(start))
}
