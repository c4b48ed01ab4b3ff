package main

import "testing"

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
