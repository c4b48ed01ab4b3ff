package dns

import (
	"net/netip"
	"testing"

	miekg "github.com/miekg/dns"
)

// FuzzRespond feeds arbitrary bytes to the handler the way the server does:
// what miekg/dns parses goes to respond (what it cannot parse, it answers
// FORMERR or drops itself; TestRawMessages covers that). respond must never
// panic, and must answer every query with a well-formed reply that fits the
// transport, and answer no response.
//
// Run: go test -run XXX -fuzz FuzzRespond ./netboot/dns/
func FuzzRespond(f *testing.F) {
	seed := func(m *miekg.Msg) {
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, false)
		f.Add(b, true)
	}
	for _, q := range []struct {
		name  string
		qtype uint16
	}{
		{"node1.rack.example.", miekg.TypeA},
		{"NODE1.rack.example.", miekg.TypeANY},
		{"many.rack.example.", miekg.TypeAAAA},
		{"nope.rack.example.", miekg.TypeA},
		{"rack.example.", miekg.TypeNS},
		{"rack.example.", miekg.TypeSOA},
		{"rack.example.", miekg.TypeAXFR},
		{"11.0.0.10.in-addr.arpa.", miekg.TypePTR},
		{"0.0.10.in-addr.arpa.", miekg.TypePTR},
		{"x.0.0.10.in-addr.arpa.", miekg.TypePTR},
		{"1.1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa.", miekg.TypePTR},
		{"example.com.", miekg.TypeA},
	} {
		seed(query(q.name, q.qtype))
		seed(withEDNS(query(q.name, q.qtype), 4096, 0, true))
	}
	seed(withEDNS(query("node1.rack.example.", miekg.TypeA), 1232, 1, false))
	two := query("node1.rack.example.", miekg.TypeA)
	two.Question = append(two.Question, two.Question[0])
	seed(two)
	update := new(miekg.Msg)
	update.SetUpdate("rack.example.")
	seed(update)
	f.Add([]byte{0x12, 0x34, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0}, false)
	f.Add([]byte{}, false)

	s := New(Config{NSAddrs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}, newFakeZone(), nil, nil)

	f.Fuzz(func(t *testing.T, raw []byte, tcp bool) {
		req := new(miekg.Msg)
		if err := req.Unpack(raw); err != nil {
			return
		}
		wire, rcode := s.respond(t.Context(), req, tcp)
		if req.Response {
			if wire != nil {
				t.Fatal("a response was answered")
			}
			return
		}
		if wire == nil {
			t.Fatal("no reply to a query")
		}
		limit := miekg.MaxMsgSize
		if !tcp {
			limit = miekg.MinMsgSize
			if opt := req.IsEdns0(); opt != nil {
				limit = int(max(miekg.MinMsgSize, min(opt.UDPSize(), DefaultUDPSize)))
			}
		}
		if len(wire) > limit {
			t.Fatalf("reply of %d bytes over a %d-byte limit", len(wire), limit)
		}
		r := new(miekg.Msg)
		if err := r.Unpack(wire); err != nil {
			t.Fatalf("reply does not parse: %v", err)
		}
		if r.Id != req.Id || !r.Response || r.Opcode != req.Opcode || r.RecursionAvailable {
			t.Fatalf("reply header %+v to request header %+v", r.MsgHdr, req.MsgHdr)
		}
		if r.Rcode != rcode {
			t.Fatalf("reply rcode %d, respond said %d", r.Rcode, rcode)
		}
		if r.Authoritative && rcode != miekg.RcodeSuccess && rcode != miekg.RcodeNameError {
			t.Fatalf("AA set on rcode %d", rcode)
		}
		if len(req.Question) == 1 {
			if len(r.Question) != 1 || r.Question[0] != req.Question[0] {
				t.Fatalf("question %v, want %v echoed", r.Question, req.Question)
			}
			for _, rr := range r.Answer {
				if rr.Header().Name != req.Question[0].Name {
					t.Fatalf("answer %v not owned by the question's name %q", rr, req.Question[0].Name)
				}
			}
		} else if len(r.Question) != 0 || (rcode != miekg.RcodeFormatError && rcode != miekg.RcodeNotImplemented) {
			t.Fatalf("rcode %d question %v to %d questions, want FORMERR (or NOTIMP) and no question", rcode, r.Question, len(req.Question))
		}
		if r.IsEdns0() != nil && req.IsEdns0() == nil {
			t.Fatal("OPT in the reply to a request without one")
		}
	})
}
