package main

import (
	"math"
	"testing"
)

// Output of perfdhcp (Kea 2.2) against a server that answered everything,
// and against none.
const (
	answered = `Running: perfdhcp -4 -l 10.77.0.2 -r 2000 -R 60000 -p 5 -W 1000000 10.77.0.1
Scenario: basic.
Multi-thread mode enabled.
***Rate statistics***
Rate: 1666.21 4-way exchanges/second, expected rate: 2000

***Malformed Packets***
Malformed packets: 0
***Statistics for: DISCOVER-OFFER***
sent packets: 9999
received packets: 9999
drops: 0
drops ratio: 0 %
orphans: 0
rejected leases: 0
non unique addresses: 0

min delay: 0.049 ms
avg delay: 0.153 ms
max delay: 4.452 ms
std deviation: 0.154 ms
collected packets: 0

***Statistics for: REQUEST-ACK***
sent packets: 9999
received packets: 9990
drops: 9
drops ratio: 0.090 %
orphans: 0
rejected leases: 0
non unique addresses: 0

min delay: 0.078 ms
avg delay: 0.195 ms
max delay: 4.466 ms
std deviation: 0.150 ms
collected packets: 0
`
	silent = `***Rate statistics***
Rate: 0 4-way exchanges/second, expected rate: 100

***Statistics for: DISCOVER-OFFER***
sent packets: 199
received packets: 0
drops: 199
drops ratio: 100 %

min delay: inf ms
avg delay: min delay: n/a
avg delay: n/a
max delay: n/a
std deviation: n/a
collected packets: 0

***Statistics for: REQUEST-ACK***
sent packets: 0
received packets: 0
drops: 0
drops ratio: -nan %

min delay: inf ms
avg delay: min delay: n/a
avg delay: n/a
max delay: n/a
std deviation: n/a
`
)

func TestParsePerfdhcp(t *testing.T) {
	r, err := parsePerfdhcp(answered)
	if err != nil {
		t.Fatal(err)
	}
	if r.rate != 1666.21 || r.do.sent != 9999 || r.do.received != 9999 || r.ra.received != 9990 || r.ra.drops != 9 {
		t.Errorf("counts: %+v", r)
	}
	if r.do.min != 0.049 || r.do.avg != 0.153 || r.do.max != 4.452 || r.do.std != 0.154 ||
		r.ra.min != 0.078 || r.ra.avg != 0.195 || r.ra.max != 4.466 || r.ra.std != 0.150 {
		t.Errorf("delays: %+v", r)
	}
	if r.acks() != 9990 || math.Abs(r.lossPct()-0.09) > 0.001 {
		t.Errorf("acks %d, loss %.4f%%", r.acks(), r.lossPct())
	}

	r, err = parsePerfdhcp(silent)
	if err != nil {
		t.Fatal(err)
	}
	if r.do.sent != 199 || r.do.received != 0 || r.acks() != 0 || r.lossPct() != 100 {
		t.Errorf("counts: %+v", r)
	}
	if !math.IsNaN(r.do.min) || !math.IsNaN(r.do.avg) || !math.IsNaN(r.ra.std) {
		t.Errorf("delays should be NaN: %+v", r)
	}

	if _, err := parsePerfdhcp("perfdhcp: bad option\n"); err == nil {
		t.Error("no statistics: want an error")
	}
}

func TestParseRcvbufErrors(t *testing.T) {
	const snmp = `Ip: Forwarding DefaultTTL
Ip: 1 64
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
Udp: 28603 3 995 29615 990 0 0 0 0
UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
UdpLite: 0 0 0 0 7 0 0 0 0
`
	n, err := parseRcvbufErrors(snmp)
	if err != nil || n != 990 {
		t.Errorf("got %d, %v; want 990", n, err)
	}
	if _, err := parseRcvbufErrors("Ip: 1 64\n"); err == nil {
		t.Error("no Udp lines: want an error")
	}
}

func TestParsePerfStat(t *testing.T) {
	const out = `5242,,raw_syscalls:sys_enter,10020339911,100.00,,
317,,context-switches,10020339911,100.00,0.032,K/sec
`
	sc, cs, err := parsePerfStat(out)
	if err != nil || sc != 5242 || cs != 317 {
		t.Errorf("got %d, %d, %v; want 5242, 317", sc, cs, err)
	}
	if _, _, err := parsePerfStat("<not counted>,,raw_syscalls:sys_enter,0,0,,\n"); err == nil {
		t.Error("nothing counted: want an error")
	}
}
