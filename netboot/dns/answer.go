package dns

import (
	"context"
	"net"
	"net/netip"
	"time"

	miekg "github.com/miekg/dns"
)

// respond builds the reply to req as it goes on the wire, and its rcode.
// A nil reply means send nothing. Over UDP the reply is cut to the size the
// client can take, with TC set, so that it retries over TCP (RFC 1035
// section 4.2.1, RFC 6891 section 7).
func (s *Server) respond(ctx context.Context, req *miekg.Msg, tcp bool) ([]byte, int) {
	if req.Response {
		return nil, 0 // see accept
	}
	reply := s.reply(ctx, req)
	limit := miekg.MaxMsgSize
	if !tcp {
		limit = s.udpLimit(req)
	}
	reply.Compress = true
	reply.Truncate(limit)
	wire, err := reply.Pack()
	if err == nil {
		return wire, reply.Rcode
	}
	// Only data from the Zone can fail to pack (a PTR target that is no
	// domain name); the question came off the wire and packs again.
	s.log.Warn("dns: packing reply", "qname", qname(req), "err", err)
	fail := header(req)
	fail.Rcode = miekg.RcodeServerFailure
	fail.Extra = opts(reply)
	if wire, err = fail.Pack(); err != nil {
		return nil, 0
	}
	return wire, fail.Rcode
}

// udpLimit is the largest UDP reply the client takes: 512 bytes without
// EDNS0 (RFC 1035 section 2.3.4), else the payload size it advertises, but
// no less than 512 (RFC 6891 section 6.2.5) and no more than ours.
func (s *Server) udpLimit(req *miekg.Msg) int {
	opt, ok := findOPT(req)
	if !ok || opt == nil {
		return miekg.MinMsgSize
	}
	return int(max(miekg.MinMsgSize, min(opt.UDPSize(), s.cfg.UDPSize)))
}

// header starts the reply to req: same ID, opcode and question, RD and CD
// copied (RFC 1035 section 4.1.1; RFC 4035 section 3.2.2 for CD), RA clear
// because rackd never recurses.
func header(req *miekg.Msg) *miekg.Msg {
	m := new(miekg.Msg)
	m.Id = req.Id
	m.Response = true
	m.Opcode = req.Opcode
	if req.Opcode == miekg.OpcodeQuery {
		m.RecursionDesired = req.RecursionDesired
		m.CheckingDisabled = req.CheckingDisabled
	}
	// The question is echoed as sent, case included: resolvers match the
	// answer to the query with it, and some randomise the case of the name
	// to make spoofing harder (draft-vixie-dnsext-dns0x20).
	if len(req.Question) == 1 {
		m.Question = []miekg.Question{req.Question[0]}
	}
	return m
}

// reply decides the answer to req: the checks of the message itself, then
// the lookup.
func (s *Server) reply(ctx context.Context, req *miekg.Msg) *miekg.Msg {
	m := header(req)
	opt, ok := findOPT(req)
	if !ok {
		// More than one OPT, or one out of place (RFC 6891 section 6.1.1).
		m.Rcode = miekg.RcodeFormatError
		return m
	}
	if opt != nil {
		// Answer EDNS with EDNS, and only then (RFC 6891 section 7).
		m.Extra = append(m.Extra, s.opt(opt))
	}
	switch {
	case req.Opcode != miekg.OpcodeQuery:
		// NOTIFY, UPDATE, STATUS...: rackd's zones change only through
		// the store (RFC 1035 section 4.1.1).
		m.Rcode = miekg.RcodeNotImplemented
	case len(req.Question) != 1:
		// A query asks exactly one question (RFC 9619).
		m.Rcode = miekg.RcodeFormatError
	case opt != nil && opt.Version() != 0:
		// Only EDNS version 0 exists; the OPT of the reply says which
		// version we speak (RFC 6891 section 6.1.3).
		m.Rcode = miekg.RcodeBadVers
	default:
		s.lookup(ctx, m, req.Question[0])
	}
	return m
}

// findOPT returns the request's OPT record (nil without EDNS0). ok is false
// when the request carries more than one, or one that is not in the
// additional section or not owned by the root: a FORMERR.
func findOPT(req *miekg.Msg) (opt *miekg.OPT, ok bool) {
	for _, rr := range req.Answer {
		if rr.Header().Rrtype == miekg.TypeOPT {
			return nil, false
		}
	}
	for _, rr := range req.Ns {
		if rr.Header().Rrtype == miekg.TypeOPT {
			return nil, false
		}
	}
	for _, rr := range req.Extra {
		if rr.Header().Rrtype != miekg.TypeOPT {
			continue
		}
		o, isOPT := rr.(*miekg.OPT)
		if opt != nil || !isOPT || o.Hdr.Name != "." {
			return nil, false
		}
		opt = o
	}
	return opt, true
}

// opt is the OPT record of a reply to a request carrying req: our payload
// size, version 0, no options (options we do not know are not echoed, RFC
// 6891 section 6.1.2), and the DO bit copied (RFC 3225 section 3).
func (s *Server) opt(req *miekg.OPT) *miekg.OPT {
	o := &miekg.OPT{Hdr: miekg.RR_Header{Name: ".", Rrtype: miekg.TypeOPT}}
	o.SetUDPSize(s.cfg.UDPSize)
	if req.Do() {
		o.SetDo()
	}
	return o
}

// opts keeps the OPT records of m's additional section.
func opts(m *miekg.Msg) []miekg.RR {
	var out []miekg.RR
	for _, rr := range m.Extra {
		if rr.Header().Rrtype == miekg.TypeOPT {
			out = append(out, rr)
		}
	}
	return out
}

// qname is the request's question name, for logs.
func qname(req *miekg.Msg) string {
	if len(req.Question) == 0 {
		return ""
	}
	return req.Question[0].Name
}

// lookup answers q into m from the Zone.
func (s *Server) lookup(ctx context.Context, m *miekg.Msg, q miekg.Question) {
	if q.Qclass != miekg.ClassINET && q.Qclass != miekg.ClassANY {
		// CHAOS (version.bind) and the like: no data of ours.
		m.Rcode = miekg.RcodeRefused
		return
	}
	// Names compare case-insensitively (RFC 1034 section 3.1); the Zone
	// speaks lower case.
	name := miekg.CanonicalName(q.Name)
	zone, ok, err := s.zone.Authority(ctx, name)
	if err != nil {
		s.log.Warn("dns: zone authority", "qname", name, "err", err)
		m.Rcode = miekg.RcodeServerFailure
		return
	}
	if !ok {
		// Not ours, and rackd does not recurse: refuse rather than
		// point elsewhere (RFC 1035 section 4.1.1).
		m.Rcode = miekg.RcodeRefused
		return
	}
	zone = miekg.CanonicalName(zone)
	if !miekg.IsSubDomain(zone, name) {
		s.log.Error("dns: zone authority outside the name", "qname", name, "zone", zone)
		m.Rcode = miekg.RcodeServerFailure
		return
	}
	if q.Qtype == miekg.TypeAXFR || q.Qtype == miekg.TypeIXFR {
		// The zones live in the store; no secondary copies them.
		m.Rcode = miekg.RcodeRefused
		return
	}
	answer, extra, exists, err := s.records(ctx, zone, name, q)
	if err != nil {
		s.log.Warn("dns: zone lookup", "qname", name, "err", err)
		m.Rcode = miekg.RcodeServerFailure
		return
	}
	m.Authoritative = true
	switch {
	case !exists:
		// Name error, with the zone's SOA so that resolvers cache it
		// for the SOA's MINIMUM (RFC 2308 sections 2.1 and 3).
		m.Rcode = miekg.RcodeNameError
		m.Ns = []miekg.RR{s.soa(zone, zone, s.negTTL())}
	case len(answer) == 0:
		// NODATA: the name exists without this type (RFC 2308
		// section 2.2).
		m.Ns = []miekg.RR{s.soa(zone, zone, s.negTTL())}
	default:
		m.Answer = answer
		m.Extra = append(extra, m.Extra...)
	}
}

// records gathers the records of name (inside zone) that q asks for, the
// additional records that go with them, and whether the name exists at all
// (which tells NODATA from NXDOMAIN).
//
// Caveat: a forward name with no address of its own but names below it (an
// empty non-terminal: "mgmt.rack.example." when only "sw1.mgmt.rack.example."
// exists) is answered NXDOMAIN, since the Zone cannot tell that something
// lies below. Names one label below the domain never meet this.
func (s *Server) records(ctx context.Context, zone, name string, q miekg.Question) (answer, extra []miekg.RR, exists bool, err error) {
	// Records take the owner name as the query spelt it.
	owner := q.Name
	want := func(t uint16) bool { return q.Qtype == t || q.Qtype == miekg.TypeANY }
	ttl := seconds(s.cfg.TTL)

	if name == zone {
		// The apex exists and has the records we synthesise (RFC 1035
		// section 4.3.2: SOA and NS of every zone).
		exists = true
		if want(miekg.TypeSOA) {
			answer = append(answer, s.soa(zone, owner, ttl))
		}
		if want(miekg.TypeNS) {
			ns := s.nsName(zone)
			answer = append(answer, &miekg.NS{Hdr: hdr(owner, miekg.TypeNS, ttl), Ns: ns})
			extra = s.glue(ctx, ns)
		}
	}

	var addrs []netip.Addr
	if name == s.nsName(zone) {
		// The name server's own name, synthesised in every zone unless
		// the Zone has it.
		if addrs, err = s.nsAddrs(ctx, name); err != nil {
			return nil, nil, false, err
		}
	} else {
		p, kind := parseReverse(name)
		switch kind {
		case notReverse:
			if addrs, err = s.zone.Forward(ctx, name); err != nil {
				return nil, nil, false, err
			}
		case reverseAddr:
			host, rerr := s.zone.Reverse(ctx, p.Addr())
			if rerr != nil {
				return nil, nil, false, rerr
			}
			if host != "" {
				exists = true
				if want(miekg.TypePTR) {
					answer = append(answer, &miekg.PTR{Hdr: hdr(owner, miekg.TypePTR, ttl), Ptr: miekg.Fqdn(host)})
				}
			}
		case reversePrefix:
			// A partial reverse name ("1.0.10.in-addr.arpa." in a /16)
			// is answered as an empty non-terminal: NODATA, never
			// NXDOMAIN, which would tell a resolver that nothing
			// below it exists (RFC 8020), and a resolver minimising
			// its queries walks exactly these names (RFC 9156). The
			// Zone cannot list what is below, so a prefix with no
			// address under it gets NODATA too, which is harmless.
			exists = true
		case reverseMalformed:
			// No address maps to it: NXDOMAIN, unless it is the apex.
		}
	}
	for _, a := range addrs {
		a = a.Unmap().WithZone("")
		switch {
		case a.Is4():
			exists = true
			if want(miekg.TypeA) {
				answer = append(answer, &miekg.A{Hdr: hdr(owner, miekg.TypeA, ttl), A: net.IP(a.AsSlice())})
			}
		case a.Is6():
			exists = true
			if want(miekg.TypeAAAA) {
				answer = append(answer, &miekg.AAAA{Hdr: hdr(owner, miekg.TypeAAAA, ttl), AAAA: net.IP(a.AsSlice())})
			}
		}
	}
	return answer, extra, exists, nil
}

// nsName is the name server's name in zone.
func (s *Server) nsName(zone string) string {
	if s.cfg.NS != "" {
		return s.cfg.NS
	}
	return "ns." + zone
}

// nsAddrs are the name server's addresses: the Zone's, else NSAddrs.
func (s *Server) nsAddrs(ctx context.Context, ns string) ([]netip.Addr, error) {
	var addrs []netip.Addr
	if _, kind := parseReverse(ns); kind == notReverse {
		var err error
		if addrs, err = s.zone.Forward(ctx, ns); err != nil {
			return nil, err
		}
	}
	if len(addrs) == 0 {
		addrs = s.cfg.NSAddrs
	}
	return addrs, nil
}

// glue is the additional section of an NS answer: the name server's
// addresses when it lies in a zone of ours, so that a resolver need not ask
// again (RFC 1034 section 4.3.2 step 6). Additional data is optional, so a
// failure only leaves it out.
func (s *Server) glue(ctx context.Context, ns string) []miekg.RR {
	if _, ok, err := s.zone.Authority(ctx, ns); err != nil || !ok {
		return nil
	}
	addrs, err := s.nsAddrs(ctx, ns)
	if err != nil {
		s.log.Debug("dns: name server addresses", "ns", ns, "err", err)
		return nil
	}
	ttl := seconds(s.cfg.TTL)
	var rrs []miekg.RR
	for _, a := range addrs {
		a = a.Unmap().WithZone("")
		switch {
		case a.Is4():
			rrs = append(rrs, &miekg.A{Hdr: hdr(ns, miekg.TypeA, ttl), A: net.IP(a.AsSlice())})
		case a.Is6():
			rrs = append(rrs, &miekg.AAAA{Hdr: hdr(ns, miekg.TypeAAAA, ttl), AAAA: net.IP(a.AsSlice())})
		}
	}
	return rrs
}

// soa synthesises zone's SOA record, owned by owner. The serial is the
// time in seconds: rackd keeps no zone version, and a serial that only grows
// is all RFC 1982 asks; no secondary polls it anyway.
func (s *Server) soa(zone, owner string, ttl uint32) *miekg.SOA {
	mbox := s.cfg.Hostmaster
	if mbox == "" {
		mbox = "hostmaster." + zone
	}
	return &miekg.SOA{
		Hdr:     hdr(owner, miekg.TypeSOA, ttl),
		Ns:      s.nsName(zone),
		Mbox:    mbox,
		Serial:  uint32(s.now().Unix()),
		Refresh: soaRefresh,
		Retry:   soaRetry,
		Expire:  soaExpire,
		// MINIMUM is the negative-caching TTL (RFC 2308 section 4).
		Minttl: s.negTTL(),
	}
}

// negTTL is the negative-caching TTL in seconds. The SOA of a negative
// answer carries it as its own TTL too, since resolvers cache the negative
// answer for the lesser of the two (RFC 2308 section 5).
func (s *Server) negTTL() uint32 { return seconds(s.cfg.NegativeTTL) }

// hdr is the header of a record of ours.
func hdr(owner string, t uint16, ttl uint32) miekg.RR_Header {
	return miekg.RR_Header{Name: owner, Rrtype: t, Class: miekg.ClassINET, Ttl: ttl}
}

// seconds is a TTL in whole seconds, capped at 2^31-1 as RFC 2181 section 8
// wants.
func seconds(d time.Duration) uint32 {
	return uint32(min(d/time.Second, 1<<31-1))
}
