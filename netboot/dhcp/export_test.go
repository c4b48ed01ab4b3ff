package dhcp

import "github.com/insomniacslk/dhcp/dhcpv4"

// EncodeReply is the server's encoding of a reply, for the external tests
// to compare with the library's.
func EncodeReply(m *dhcpv4.DHCPv4) []byte { return appendReply(nil, m) }
