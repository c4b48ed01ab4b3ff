package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"rackd/bench/internal/benchns"
)

// The served subnet. perfdhcp, given the server's unicast address, acts as
// a relay with giaddr = the client's address (benchns.ClientIP), so the
// served subnet must contain it; the interfaces themselves keep a /24.
const (
	servedCIDR = "10.77.0.0/16"
	poolStart  = "10.77.1.0"
	poolEnd    = "10.77.255.254"
	poolMask   = "255.255.0.0"
)

// cpuTicks is the CPU time (utime+stime, all threads) of pid so far, in
// USER_HZ ticks: /proc reports it in USER_HZ, which Linux fixes at 100.
func cpuTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; the fields after it
	// start with the state (field 3). utime and stime are fields 14, 15.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	var ut, st int64
	if _, err := fmt.Sscan(f[11], &ut); err != nil {
		return 0, err
	}
	if _, err := fmt.Sscan(f[12], &st); err != nil {
		return 0, err
	}
	return ut + st, nil
}

// fsyncLatency appends 4 KiB blocks to a file in dir, each followed by an
// fsync, at most n of them and for at most limit, and returns the median and
// the 99th percentile of the write+fsync time: the disk's answer to the
// lease stores that fsync, at the time of the measurement.
func fsyncLatency(dir string, n int, limit time.Duration) (p50, p99 time.Duration, count int, err error) {
	f, err := os.CreateTemp(dir, "fsync-")
	if err != nil {
		return 0, 0, 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	block := make([]byte, 4096)
	var d []time.Duration
	start := time.Now()
	for len(d) < n && time.Since(start) < limit {
		t := time.Now()
		if _, err := f.Write(block); err != nil {
			return 0, 0, 0, err
		}
		if err := f.Sync(); err != nil {
			return 0, 0, 0, err
		}
		d = append(d, time.Since(t))
	}
	slices.Sort(d)
	return d[len(d)/2], d[(len(d)*99)/100], len(d), nil
}

// udpRcvbufErrors is the RcvbufErrors counter of UDP in namespace ns
// (/proc/net/snmp as seen from inside it): datagrams that arrived for a
// socket whose receive buffer was full. In the client namespace these are
// replies that reached perfdhcp's socket faster than perfdhcp read them.
func udpRcvbufErrors(ctx context.Context, ns string) (int64, error) {
	out, err := benchns.Command(ctx, "ip", "netns", "exec", ns, "cat", "/proc/net/snmp")
	if err != nil {
		return 0, fmt.Errorf("read /proc/net/snmp in %s: %v: %s", ns, err, out)
	}
	return parseRcvbufErrors(string(out))
}

// parseRcvbufErrors reads RcvbufErrors from /proc/net/snmp's two "Udp:"
// lines (names, then values).
func parseRcvbufErrors(snmp string) (int64, error) {
	var names []string
	for _, line := range strings.Split(snmp, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "Udp:" {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		i := slices.Index(names, "RcvbufErrors")
		if i < 0 || i >= len(f) {
			break
		}
		return strconv.ParseInt(f[i], 10, 64)
	}
	return 0, fmt.Errorf("no Udp RcvbufErrors in /proc/net/snmp")
}
