// Package dns is rackd's authoritative DNS server for the zones it manages:
// the domain of each managed subnet (A and AAAA for machines and named
// reservations) and the reverse zones of the subnets (PTR, RFC 1035 section
// 3.5 and RFC 3596 section 2.5).
//
// The server answers from a Zone on every query and keeps no cache, so a
// change in the store is in the very next answer; the short TTL (30s by
// default) bounds how long resolvers keep an old one. It synthesises each
// zone's SOA and NS at the apex, answers names it does not know with
// NXDOMAIN and names without the asked type with NODATA, both with the SOA
// for negative caching (RFC 2308), and refuses everything outside its zones:
// it never recurses (RA is always clear). It speaks EDNS0 (RFC 6891) and
// truncates over UDP what does not fit, for the client to ask again over TCP.
//
// Zone transfers (AXFR, IXFR), dynamic update, NOTIFY and DNSSEC are not
// offered.
package dns
