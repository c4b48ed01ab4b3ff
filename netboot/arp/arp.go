// Package arp finds out whether an IPv4 address is already in use on a link,
// with the ARP probes of RFC 5227 section 2.1. rackd's DHCP server probes a
// dynamic address before offering it, so that a host configured by hand on
// the managed subnet (a "squatter") is discovered and never handed a twin.
//
// A probe is an ARP request whose sender IP address is 0.0.0.0, so that it
// does not pollute the ARP caches of the hosts that see it (RFC 5227 section
// 1.1). The address is in use if any ARP packet, request or reply, arrives
// with it as the sender IP address before the timeout.
package arp

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
)

// Operation is the ARP opcode (RFC 826).
type Operation uint16

// ARP opcodes.
const (
	OpRequest Operation = 1
	OpReply   Operation = 2
)

// packetLen is the length of an ARP packet for Ethernet and IPv4: the fixed
// 8-byte header plus two (6-byte hardware, 4-byte protocol) address pairs.
const packetLen = 28

const (
	hwTypeEthernet = 1      // RFC 826 ar$hrd for Ethernet (IANA hardware type 1)
	protoIPv4      = 0x0800 // ar$pro: the IPv4 EtherType
)

// Packet is an ARP packet for Ethernet and IPv4: the only kind rackd sends
// or reads.
type Packet struct {
	Op        Operation
	SenderMAC net.HardwareAddr
	SenderIP  netip.Addr
	TargetMAC net.HardwareAddr
	TargetIP  netip.Addr
}

// ErrMalformed is returned by Parse for a packet that is not a well-formed
// Ethernet/IPv4 ARP packet.
var ErrMalformed = errors.New("arp: malformed packet")

// Probe returns the RFC 5227 section 2.1.1 probe for ip from a host whose
// hardware address is mac: an ARP request with sender IP 0.0.0.0 and an
// all-zero target hardware address.
func Probe(mac net.HardwareAddr, ip netip.Addr) Packet {
	return Packet{
		Op:        OpRequest,
		SenderMAC: mac,
		SenderIP:  netip.IPv4Unspecified(),
		TargetMAC: make(net.HardwareAddr, 6),
		TargetIP:  ip,
	}
}

// Marshal encodes p. Addresses must be 6-byte MACs and IPv4 addresses.
func (p Packet) Marshal() ([]byte, error) {
	if len(p.SenderMAC) != 6 || len(p.TargetMAC) != 6 || !p.SenderIP.Is4() || !p.TargetIP.Is4() {
		return nil, errors.New("arp: only Ethernet and IPv4 addresses are supported")
	}
	b := make([]byte, packetLen)
	binary.BigEndian.PutUint16(b[0:2], hwTypeEthernet)
	binary.BigEndian.PutUint16(b[2:4], protoIPv4)
	b[4], b[5] = 6, 4
	binary.BigEndian.PutUint16(b[6:8], uint16(p.Op))
	copy(b[8:14], p.SenderMAC)
	s := p.SenderIP.As4()
	copy(b[14:18], s[:])
	copy(b[18:24], p.TargetMAC)
	d := p.TargetIP.As4()
	copy(b[24:28], d[:])
	return b, nil
}

// Parse decodes an Ethernet/IPv4 ARP packet (without the Ethernet header).
// Trailing bytes, such as Ethernet padding to the 60-byte minimum frame, are
// ignored.
func Parse(b []byte) (Packet, error) {
	if len(b) < packetLen ||
		binary.BigEndian.Uint16(b[0:2]) != hwTypeEthernet ||
		binary.BigEndian.Uint16(b[2:4]) != protoIPv4 ||
		b[4] != 6 || b[5] != 4 {
		return Packet{}, ErrMalformed
	}
	return Packet{
		Op:        Operation(binary.BigEndian.Uint16(b[6:8])),
		SenderMAC: append(net.HardwareAddr(nil), b[8:14]...),
		SenderIP:  netip.AddrFrom4([4]byte(b[14:18])),
		TargetMAC: append(net.HardwareAddr(nil), b[18:24]...),
		TargetIP:  netip.AddrFrom4([4]byte(b[24:28])),
	}, nil
}
