package dns

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	miekg "github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// rr renders a record written in zone-file syntax the way miekg/dns prints
// it, so that expectations read naturally.
func rr(t *testing.T, s string) string {
	t.Helper()
	r, err := miekg.NewRR(s)
	if err != nil {
		t.Fatalf("bad expected record %q: %v", s, err)
	}
	return r.String()
}

func rrs(t *testing.T, ss ...string) []string {
	var out []string
	for _, s := range ss {
		out = append(out, rr(t, s))
	}
	return out
}

// withEDNS adds an OPT record to m.
func withEDNS(m *miekg.Msg, size uint16, version uint8, do bool) *miekg.Msg {
	m.SetEdns0(size, do)
	m.IsEdns0().SetVersion(version)
	return m
}

func TestAnswers(t *testing.T) {
	z := newFakeZone()
	s, _ := startServer(t, Config{}, z)
	addr := s.Addr()

	const (
		soaFwd = "rack.example. 30 IN SOA ns.rack.example. hostmaster.rack.example. 1700000000 3600 900 1209600 30"
		soaV4  = "0.10.in-addr.arpa. 30 IN SOA ns.0.10.in-addr.arpa. hostmaster.0.10.in-addr.arpa. 1700000000 3600 900 1209600 30"
		soaV6  = "8.b.d.0.1.0.0.2.ip6.arpa. 30 IN SOA ns.8.b.d.0.1.0.0.2.ip6.arpa. hostmaster.8.b.d.0.1.0.0.2.ip6.arpa. 1700000000 3600 900 1209600 30"
		rev6   = "1.1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa."
	)
	twoQuestions := query("node1.rack.example.", miekg.TypeA)
	twoQuestions.Question = append(twoQuestions.Question, miekg.Question{Name: "v4only.rack.example.", Qtype: miekg.TypeA, Qclass: miekg.ClassINET})
	noQuestion := query("node1.rack.example.", miekg.TypeA)
	noQuestion.Question = nil
	update := new(miekg.Msg)
	update.SetUpdate("rack.example.")
	status := query("rack.example.", miekg.TypeSOA)
	status.Opcode = miekg.OpcodeStatus
	rd := query("node1.rack.example.", miekg.TypeA)
	rd.RecursionDesired = true
	chaos := query("version.bind.", miekg.TypeTXT)
	chaos.Question[0].Qclass = miekg.ClassCHAOS
	classANY := query("node1.rack.example.", miekg.TypeA)
	classANY.Question[0].Qclass = miekg.ClassANY
	twoOPT := withEDNS(query("node1.rack.example.", miekg.TypeA), 1232, 0, false)
	twoOPT.Extra = append(twoOPT.Extra, &miekg.OPT{Hdr: miekg.RR_Header{Name: ".", Rrtype: miekg.TypeOPT}})
	optInAnswer := query("node1.rack.example.", miekg.TypeA)
	optInAnswer.Answer = []miekg.RR{&miekg.OPT{Hdr: miekg.RR_Header{Name: ".", Rrtype: miekg.TypeOPT}}}

	tests := map[string]struct {
		msg    *miekg.Msg
		tcp    bool
		rcode  int
		aa, tc bool
		answer []string // nil: no answer; checked unless nAnswer is set
		// nAnswer, when set, checks the number of answers instead.
		nAnswer int
		ns      []string
		extra   []string // OPT left out
		opt     uint16   // the OPT's UDP size, 0: no OPT wanted
		noQ     bool     // the reply carries no question
		maxSize int      // the reply fits this many bytes
	}{
		"A": {
			msg: query("node1.rack.example.", miekg.TypeA), aa: true,
			answer: rrs(t, "node1.rack.example. 30 IN A 10.0.0.11"),
		},
		"A keeps the query's case": {
			msg: query("NoDe1.RACK.example.", miekg.TypeA), aa: true,
			answer: rrs(t, "NoDe1.RACK.example. 30 IN A 10.0.0.11"),
		},
		"A over TCP": {
			msg: query("node1.rack.example.", miekg.TypeA), tcp: true, aa: true,
			answer: rrs(t, "node1.rack.example. 30 IN A 10.0.0.11"),
		},
		"AAAA": {
			msg: query("node1.rack.example.", miekg.TypeAAAA), aa: true,
			answer: rrs(t, "node1.rack.example. 30 IN AAAA 2001:db8::11"),
		},
		"ANY gives both families": {
			msg: query("node1.rack.example.", miekg.TypeANY), aa: true,
			answer: rrs(t, "node1.rack.example. 30 IN A 10.0.0.11", "node1.rack.example. 30 IN AAAA 2001:db8::11"),
		},
		"class ANY is class IN": {
			msg: classANY, aa: true,
			answer: rrs(t, "node1.rack.example. 30 IN A 10.0.0.11"),
		},
		"a v4-mapped address is an A": {
			msg: query("mapped.rack.example.", miekg.TypeA), aa: true,
			answer: rrs(t, "mapped.rack.example. 30 IN A 10.0.0.14"),
		},
		"A of a v6-only name is NODATA": {
			msg: query("v6only.rack.example.", miekg.TypeA), aa: true,
			ns: rrs(t, soaFwd),
		},
		"AAAA of a v4-only name is NODATA": {
			msg: query("v4only.rack.example.", miekg.TypeAAAA), aa: true,
			ns: rrs(t, soaFwd),
		},
		"MX of a name is NODATA": {
			msg: query("node1.rack.example.", miekg.TypeMX), aa: true,
			ns: rrs(t, soaFwd),
		},
		"a name below another": {
			msg: query("sw1.mgmt.rack.example.", miekg.TypeA), aa: true,
			answer: rrs(t, "sw1.mgmt.rack.example. 30 IN A 10.0.1.1"),
		},
		"unknown name is NXDOMAIN with the SOA": {
			msg: query("nope.rack.example.", miekg.TypeA), rcode: miekg.RcodeNameError, aa: true,
			ns: rrs(t, soaFwd),
		},
		"unknown name over TCP": {
			msg: query("nope.rack.example.", miekg.TypeAAAA), tcp: true, rcode: miekg.RcodeNameError, aa: true,
			ns: rrs(t, soaFwd),
		},
		"SOA at the apex": {
			msg: query("rack.example.", miekg.TypeSOA), aa: true,
			answer: rrs(t, soaFwd),
		},
		"NS at the apex, with glue": {
			msg: query("Rack.Example.", miekg.TypeNS), aa: true,
			answer: rrs(t, "Rack.Example. 30 IN NS ns.rack.example."),
			extra:  rrs(t, "ns.rack.example. 30 IN A 127.0.0.1"),
		},
		"A at the apex is NODATA": {
			msg: query("rack.example.", miekg.TypeA), aa: true,
			ns: rrs(t, soaFwd),
		},
		"the name server's name": {
			msg: query("ns.rack.example.", miekg.TypeA), aa: true,
			answer: rrs(t, "ns.rack.example. 30 IN A 127.0.0.1"),
		},
		"PTR v4": {
			msg: query("11.0.0.10.in-addr.arpa.", miekg.TypePTR), aa: true,
			answer: rrs(t, "11.0.0.10.in-addr.arpa. 30 IN PTR node1.rack.example."),
		},
		"PTR v4 mixed case": {
			msg: query("11.0.0.10.IN-ADDR.Arpa.", miekg.TypePTR), aa: true,
			answer: rrs(t, "11.0.0.10.IN-ADDR.Arpa. 30 IN PTR node1.rack.example."),
		},
		"PTR v6, target made fully qualified": {
			msg: query(rev6, miekg.TypePTR), aa: true,
			answer: rrs(t, rev6+" 30 IN PTR node1.rack.example."),
		},
		"PTR v6 upper-case nibbles": {
			msg: query(strings.ToUpper(rev6), miekg.TypePTR), aa: true,
			answer: rrs(t, strings.ToUpper(rev6)+" 30 IN PTR node1.rack.example."),
		},
		"PTR of an unknown address is NXDOMAIN": {
			msg: query("99.0.0.10.in-addr.arpa.", miekg.TypePTR), rcode: miekg.RcodeNameError, aa: true,
			ns: rrs(t, soaV4),
		},
		"A of a reverse name is NODATA": {
			msg: query("11.0.0.10.in-addr.arpa.", miekg.TypeA), aa: true,
			ns: rrs(t, soaV4),
		},
		"a partial reverse name is an empty non-terminal": {
			msg: query("0.0.10.in-addr.arpa.", miekg.TypePTR), aa: true,
			ns: rrs(t, soaV4),
		},
		"a partial v6 reverse name is an empty non-terminal": {
			msg: query("0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa.", miekg.TypePTR), aa: true,
			ns: rrs(t, soaV6),
		},
		"malformed reverse: not a number": {
			msg: query("x.0.0.10.in-addr.arpa.", miekg.TypePTR), rcode: miekg.RcodeNameError, aa: true,
			ns: rrs(t, soaV4),
		},
		"malformed reverse: leading zero": {
			msg: query("011.0.0.10.in-addr.arpa.", miekg.TypePTR), rcode: miekg.RcodeNameError, aa: true,
			ns: rrs(t, soaV4),
		},
		"malformed reverse: octet over 255": {
			msg: query("256.0.0.10.in-addr.arpa.", miekg.TypePTR), rcode: miekg.RcodeNameError, aa: true,
			ns: rrs(t, soaV4),
		},
		"malformed reverse: five octets": {
			msg: query("1.11.0.0.10.in-addr.arpa.", miekg.TypePTR), rcode: miekg.RcodeNameError, aa: true,
			ns: rrs(t, soaV4),
		},
		"malformed reverse: RFC 2317 label": {
			msg: query("0/25.0.0.10.in-addr.arpa.", miekg.TypePTR), rcode: miekg.RcodeNameError, aa: true,
			ns: rrs(t, soaV4),
		},
		"malformed reverse: a dot inside a label": {
			msg: query(`1\.1.0.0.10.in-addr.arpa.`, miekg.TypePTR), rcode: miekg.RcodeNameError, aa: true,
			ns: rrs(t, soaV4),
		},
		"malformed reverse: two-character nibble": {
			msg: query("11.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa.", miekg.TypePTR), rcode: miekg.RcodeNameError, aa: true,
			ns: rrs(t, soaV6),
		},
		"malformed reverse: 33 nibbles": {
			msg: query("0."+rev6, miekg.TypePTR), rcode: miekg.RcodeNameError, aa: true,
			ns: rrs(t, soaV6),
		},
		"SOA of a reverse zone": {
			msg: query("0.10.in-addr.arpa.", miekg.TypeSOA), aa: true,
			answer: rrs(t, soaV4),
		},
		"name outside is REFUSED": {
			msg: query("example.com.", miekg.TypeA), rcode: miekg.RcodeRefused,
		},
		"the parent of a zone is outside": {
			msg: query("example.", miekg.TypeSOA), rcode: miekg.RcodeRefused,
		},
		"the root is outside": {
			msg: query(".", miekg.TypeNS), rcode: miekg.RcodeRefused,
		},
		"reverse name of another subnet is REFUSED": {
			msg: query("1.1.168.192.in-addr.arpa.", miekg.TypePTR), rcode: miekg.RcodeRefused,
		},
		"CHAOS class is REFUSED": {
			msg: chaos, rcode: miekg.RcodeRefused,
		},
		"AXFR is REFUSED": {
			msg: query("rack.example.", miekg.TypeAXFR), tcp: true, rcode: miekg.RcodeRefused,
		},
		"RD is copied, RA stays clear": {
			msg: rd, aa: true,
			answer: rrs(t, "node1.rack.example. 30 IN A 10.0.0.11"),
		},
		"UPDATE is NOTIMP": {
			msg: update, rcode: miekg.RcodeNotImplemented,
		},
		"STATUS is NOTIMP": {
			msg: status, rcode: miekg.RcodeNotImplemented,
		},
		"two questions is FORMERR": {
			msg: twoQuestions, rcode: miekg.RcodeFormatError, noQ: true,
		},
		"no question is FORMERR": {
			msg: noQuestion, rcode: miekg.RcodeFormatError, noQ: true,
		},
		"EDNS0: OPT echoed with our size": {
			msg: withEDNS(query("node1.rack.example.", miekg.TypeA), 4096, 0, true), aa: true,
			answer: rrs(t, "node1.rack.example. 30 IN A 10.0.0.11"),
			opt:    DefaultUDPSize,
		},
		"EDNS0 on a negative answer": {
			msg: withEDNS(query("nope.rack.example.", miekg.TypeA), 1232, 0, false), rcode: miekg.RcodeNameError, aa: true,
			ns: rrs(t, soaFwd), opt: DefaultUDPSize,
		},
		"EDNS0 on a refusal": {
			msg: withEDNS(query("example.com.", miekg.TypeA), 1232, 0, false), rcode: miekg.RcodeRefused,
			opt: DefaultUDPSize,
		},
		"EDNS version 1 is BADVERS": {
			msg: withEDNS(query("node1.rack.example.", miekg.TypeA), 1232, 1, false), rcode: miekg.RcodeBadVers,
			opt: DefaultUDPSize,
		},
		"two OPT records is FORMERR": {
			msg: twoOPT, rcode: miekg.RcodeFormatError,
		},
		"OPT in the answer section is FORMERR": {
			msg: optInAnswer, rcode: miekg.RcodeFormatError,
		},
		"too big for UDP without EDNS: truncated to 512": {
			msg: query("many.rack.example.", miekg.TypeAAAA), aa: true, tc: true,
			nAnswer: -1, maxSize: 512,
		},
		"too big for the EDNS size: truncated to it": {
			msg: withEDNS(query("many.rack.example.", miekg.TypeAAAA), 1232, 0, false), aa: true, tc: true,
			nAnswer: -1, maxSize: 1232, opt: DefaultUDPSize,
		},
		"the client's smaller EDNS size wins": {
			msg: withEDNS(query("many.rack.example.", miekg.TypeAAAA), 600, 0, false), aa: true, tc: true,
			nAnswer: -1, maxSize: 600, opt: DefaultUDPSize,
		},
		"over TCP all of it": {
			msg: query("many.rack.example.", miekg.TypeAAAA), tcp: true, aa: true,
			nAnswer: 100,
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			r := exchange(t, addr, tt.msg.Copy(), tt.tcp)
			if r.Rcode != tt.rcode {
				t.Errorf("rcode %s, want %s", rcodeLabel(r.Rcode), rcodeLabel(tt.rcode))
			}
			if r.Id != tt.msg.Id || !r.Response || r.Opcode != tt.msg.Opcode {
				t.Errorf("header id=%d qr=%v opcode=%d, want id=%d qr opcode=%d", r.Id, r.Response, r.Opcode, tt.msg.Id, tt.msg.Opcode)
			}
			if r.Authoritative != tt.aa {
				t.Errorf("AA %v, want %v", r.Authoritative, tt.aa)
			}
			if r.Truncated != tt.tc {
				t.Errorf("TC %v, want %v", r.Truncated, tt.tc)
			}
			if r.RecursionAvailable {
				t.Error("RA set: rackd does not recurse")
			}
			if tt.msg.Opcode == miekg.OpcodeQuery && r.RecursionDesired != tt.msg.RecursionDesired {
				t.Errorf("RD %v, want it copied (%v)", r.RecursionDesired, tt.msg.RecursionDesired)
			}
			switch {
			case tt.noQ && len(r.Question) != 0:
				t.Errorf("question %v, want none", r.Question)
			case !tt.noQ && (len(r.Question) != 1 || r.Question[0] != tt.msg.Question[0]):
				t.Errorf("question %v, want %v echoed as sent", r.Question, tt.msg.Question)
			}
			switch {
			case tt.nAnswer > 0:
				if len(r.Answer) != tt.nAnswer {
					t.Errorf("%d answers, want %d", len(r.Answer), tt.nAnswer)
				}
			case tt.nAnswer < 0:
				if len(r.Answer) == 0 {
					t.Error("truncated to no answer at all")
				}
			default:
				if got := rrStrings(r.Answer); !slices.Equal(got, tt.answer) {
					t.Errorf("answer\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.answer, "\n"))
				}
			}
			if got := rrStrings(r.Ns); !slices.Equal(got, tt.ns) {
				t.Errorf("authority\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.ns, "\n"))
			}
			if got := rrStrings(r.Extra); !slices.Equal(got, tt.extra) {
				t.Errorf("additional\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.extra, "\n"))
			}
			opt := r.IsEdns0()
			switch {
			case tt.opt == 0 && opt != nil:
				t.Errorf("OPT %v in the reply, want none", opt)
			case tt.opt != 0 && opt == nil:
				t.Error("no OPT in the reply")
			case opt != nil:
				if opt.UDPSize() != tt.opt || opt.Version() != 0 {
					t.Errorf("OPT size %d version %d, want size %d version 0", opt.UDPSize(), opt.Version(), tt.opt)
				}
				if want := tt.msg.IsEdns0().Do(); opt.Do() != want {
					t.Errorf("DO %v, want it copied (%v)", opt.Do(), want)
				}
			}
			if tt.maxSize > 0 {
				r.Compress = true // as the server packs it
				wire, err := r.Pack()
				if err != nil {
					t.Fatal(err)
				}
				if len(wire) > tt.maxSize {
					t.Errorf("reply is %d bytes, want at most %d", len(wire), tt.maxSize)
				}
			}
		})
	}
}

// The server answers from the Zone on every query: a change is in the very
// next answer.
func TestNoCache(t *testing.T) {
	z := newFakeZone()
	s, _ := startServer(t, Config{}, z)
	ask := func() *miekg.Msg { return exchange(t, s.Addr(), query("new.rack.example.", miekg.TypeA), false) }

	if r := ask(); r.Rcode != miekg.RcodeNameError {
		t.Fatalf("before: rcode %s, want NXDOMAIN", rcodeLabel(r.Rcode))
	}
	z.set("new.rack.example.", "10.0.0.50")
	if r := ask(); r.Rcode != miekg.RcodeSuccess || len(r.Answer) != 1 || r.Answer[0].(*miekg.A).A.String() != "10.0.0.50" {
		t.Fatalf("after adding: %v", r)
	}
	z.set("new.rack.example.", "10.0.0.51")
	if r := ask(); len(r.Answer) != 1 || r.Answer[0].(*miekg.A).A.String() != "10.0.0.51" {
		t.Fatalf("after moving: %v", r)
	}
	z.set("new.rack.example.")
	if r := ask(); r.Rcode != miekg.RcodeNameError {
		t.Fatalf("after removing: rcode %s, want NXDOMAIN", rcodeLabel(r.Rcode))
	}
}

func TestZoneErrorIsServfail(t *testing.T) {
	z := newFakeZone()
	s, _ := startServer(t, Config{}, z)
	z.setErr(errors.New("store closed"))
	for _, q := range []*miekg.Msg{query("node1.rack.example.", miekg.TypeA), query("11.0.0.10.in-addr.arpa.", miekg.TypePTR)} {
		r := exchange(t, s.Addr(), q, false)
		if r.Rcode != miekg.RcodeServerFailure || r.Authoritative || len(r.Answer) != 0 {
			t.Errorf("%v: rcode %s aa %v answers %d, want SERVFAIL, not authoritative, empty", q.Question[0].Name, rcodeLabel(r.Rcode), r.Authoritative, len(r.Answer))
		}
	}
}

// A zone whose lookups outlast QueryTimeout fails the query rather than
// holding it.
func TestQueryTimeout(t *testing.T) {
	z := newFakeZone()
	z.block, z.entered = make(chan struct{}), make(chan struct{}, 1)
	s, _ := startServer(t, Config{QueryTimeout: 50 * time.Millisecond}, z)
	r := exchange(t, s.Addr(), query("node1.rack.example.", miekg.TypeA), false)
	if r.Rcode != miekg.RcodeServerFailure {
		t.Errorf("rcode %s, want SERVFAIL", rcodeLabel(r.Rcode))
	}
}

func TestConfigured(t *testing.T) {
	z := newFakeZone()
	s, _ := startServer(t, Config{
		TTL: 5 * time.Minute, NegativeTTL: 10 * time.Second,
		NS: "Rackd.Rack.Example", Hostmaster: "admin.example.com",
		NSAddrs: []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("2001:db8::1")},
	}, z)
	r := exchange(t, s.Addr(), query("0.10.in-addr.arpa.", miekg.TypeNS), false)
	want := []string{rr(t, "0.10.in-addr.arpa. 300 IN NS rackd.rack.example.")}
	if got := rrStrings(r.Answer); !slices.Equal(got, want) {
		t.Errorf("NS answer %v, want %v", got, want)
	}
	// The name server lies in another zone of ours: its addresses are
	// added.
	want = []string{rr(t, "rackd.rack.example. 300 IN A 10.0.0.1"), rr(t, "rackd.rack.example. 300 IN AAAA 2001:db8::1")}
	if got := rrStrings(r.Extra); !slices.Equal(got, want) {
		t.Errorf("NS glue %v, want %v", got, want)
	}
	r = exchange(t, s.Addr(), query("nope.rack.example.", miekg.TypeA), false)
	want = []string{rr(t, "rack.example. 10 IN SOA rackd.rack.example. admin.example.com. 1700000000 3600 900 1209600 10")}
	if got := rrStrings(r.Ns); !slices.Equal(got, want) {
		t.Errorf("negative SOA %v, want %v", got, want)
	}
	r = exchange(t, s.Addr(), query("rackd.rack.example.", miekg.TypeAAAA), false)
	want = []string{rr(t, "rackd.rack.example. 300 IN AAAA 2001:db8::1")}
	if got := rrStrings(r.Answer); !slices.Equal(got, want) {
		t.Errorf("name server AAAA %v, want %v", got, want)
	}
	// The Zone's own addresses for the name server's name win.
	z.set("rackd.rack.example.", "10.0.0.2")
	r = exchange(t, s.Addr(), query("rackd.rack.example.", miekg.TypeA), false)
	want = []string{rr(t, "rackd.rack.example. 300 IN A 10.0.0.2")}
	if got := rrStrings(r.Answer); !slices.Equal(got, want) {
		t.Errorf("name server A from the Zone %v, want %v", got, want)
	}
	// Out of our zones, the name server gets no glue.
	s2, _ := startServer(t, Config{NS: "ns1.elsewhere.example."}, z)
	r = exchange(t, s2.Addr(), query("rack.example.", miekg.TypeNS), false)
	if len(r.Answer) != 1 || len(rrStrings(r.Extra)) != 0 {
		t.Errorf("out-of-zone name server: answer %v extra %v, want one NS and no glue", r.Answer, r.Extra)
	}
}

func TestConfigErrors(t *testing.T) {
	for name, cfg := range map[string]Config{
		"UDP size below 512": {Listen: "127.0.0.1:0", UDPSize: 100},
		"bad NS name":        {Listen: "127.0.0.1:0", NS: "a..b"},
		"bad hostmaster":     {Listen: "127.0.0.1:0", Hostmaster: strings.Repeat("x", 64) + ".example."},
		"no listen address":  {},
		"bad listen address": {Listen: "127.0.0.1"},
	} {
		t.Run(name, func(t *testing.T) {
			s := New(cfg, newFakeZone(), testLogger(t), nil)
			if err := s.Serve(t.Context()); err == nil {
				t.Error("Serve succeeded")
			}
		})
	}
}

// Messages miekg/dns cannot parse, or that are responses, over raw UDP.
func TestRawMessages(t *testing.T) {
	s, reg := startServer(t, Config{}, newFakeZone())
	c, err := net.Dial("udp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	send := func(b []byte) *miekg.Msg {
		t.Helper()
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		buf := make([]byte, 4096)
		n, err := c.Read(buf)
		if err != nil {
			return nil
		}
		m := new(miekg.Msg)
		if err := m.Unpack(buf[:n]); err != nil {
			t.Fatalf("reply does not parse: %v", err)
		}
		return m
	}

	// A header announcing a question that is not there: miekg/dns parses
	// it as a query with no question, which the handler refuses.
	if r := send([]byte{0x12, 0x34, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0}); r == nil || r.Rcode != miekg.RcodeFormatError || r.Id != 0x1234 {
		t.Errorf("truncated question: %v, want FORMERR", r)
	}
	// A name with a compression pointer loop.
	if r := send([]byte{0, 7, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 12, 0, 1, 0, 1}); r == nil || r.Rcode != miekg.RcodeFormatError {
		t.Errorf("pointer loop: %v, want FORMERR", r)
	}
	// Shorter than a header: dropped (any reply could amplify).
	if r := send([]byte{1, 2, 3}); r != nil {
		t.Errorf("short message answered: %v", r)
	}
	// A response is never answered.
	resp := query("node1.rack.example.", miekg.TypeA)
	resp.Response = true
	b, _ := resp.Pack()
	if r := send(b); r != nil {
		t.Errorf("response answered: %v", r)
	}
	// And the server still answers.
	b, _ = query("node1.rack.example.", miekg.TypeA).Pack()
	if r := send(b); r == nil || len(r.Answer) != 1 {
		t.Errorf("good query after bad ones: %v", r)
	}
	if got := counter(t, reg, "rackd_dns_malformed_total", nil); got != 2 {
		t.Errorf("malformed_total %v, want 2 (the pointer loop and the short message)", got)
	}
}

func TestMetrics(t *testing.T) {
	z := newFakeZone()
	s, reg := startServer(t, Config{}, z)
	exchange(t, s.Addr(), query("node1.rack.example.", miekg.TypeA), false)
	exchange(t, s.Addr(), query("node1.rack.example.", miekg.TypeA), true)
	exchange(t, s.Addr(), query("nope.rack.example.", miekg.TypeA), false)
	exchange(t, s.Addr(), query("example.com.", miekg.TypeTXT), false)
	exchange(t, s.Addr(), query("11.0.0.10.in-addr.arpa.", miekg.TypePTR), false)
	exchange(t, s.Addr(), query("rack.example.", uint16(4242)), false)

	for _, c := range []struct {
		qtype, rcode string
		want         float64
	}{
		{"A", "NOERROR", 2},
		{"A", "NXDOMAIN", 1},
		{"other", "REFUSED", 1}, // TXT
		{"PTR", "NOERROR", 1},
		{"PTR", "NXDOMAIN", 0}, // pre-created
		{"other", "NOERROR", 1},
	} {
		labels := map[string]string{"qtype": c.qtype, "rcode": c.rcode}
		if got := counter(t, reg, "rackd_dns_queries_total", labels); got != c.want {
			t.Errorf("queries_total%v = %v, want %v", labels, got, c.want)
		}
	}
	if got := histogramCount(t, reg, "rackd_dns_query_duration_seconds"); got != 6 {
		t.Errorf("query_duration_seconds count %d, want 6", got)
	}
	if got := counter(t, reg, "rackd_dns_dropped_total", nil); got != 0 {
		t.Errorf("dropped_total %v, want 0", got)
	}

	// Two servers may share a registry: the series add up.
	s2 := New(Config{Listen: "127.0.0.1:0"}, z, testLogger(t), reg)
	if s2.m.queries != s.m.queries {
		t.Error("second server on the same registry does not share the queries counter")
	}
}

// Over UDP, a query beyond MaxInFlight is dropped and counted; it is
// answered again once a slot is free.
func TestMaxInFlight(t *testing.T) {
	z := newFakeZone()
	s, reg := startServer(t, Config{MaxInFlight: 1}, z)
	z.mu.Lock()
	z.block, z.entered = make(chan struct{}), make(chan struct{})
	z.mu.Unlock()

	first := make(chan *miekg.Msg, 1)
	go func() {
		r, _ := tryExchange(s.Addr(), query("node1.rack.example.", miekg.TypeA), false, 5*time.Second)
		first <- r
	}()
	<-z.entered // the first query holds the only slot
	if r, err := tryExchange(s.Addr(), query("v4only.rack.example.", miekg.TypeA), false, 300*time.Millisecond); err == nil {
		t.Errorf("second query answered while the first is in flight: %v", r)
	}
	if got := counter(t, reg, "rackd_dns_dropped_total", nil); got != 1 {
		t.Errorf("dropped_total %v, want 1", got)
	}
	z.mu.Lock()
	close(z.block)
	z.block = nil
	z.mu.Unlock()
	if r := <-first; r == nil || len(r.Answer) != 1 {
		t.Errorf("first query: %v", r)
	}
	// The first reply may reach the client just before its handler frees
	// the slot; a client retries, and so does this one.
	var r *miekg.Msg
	for try := 0; try < 10 && r == nil; try++ {
		r, _ = tryExchange(s.Addr(), query("v4only.rack.example.", miekg.TypeA), false, 200*time.Millisecond)
	}
	if r == nil || len(r.Answer) != 1 {
		t.Errorf("after the slot is free: %v", r)
	}
}

func TestShutdown(t *testing.T) {
	s, _ := newServer(t, Config{}, newFakeZone())
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(ctx) }()
	<-s.Ready()
	addr := s.Addr()
	if addr.Port() == 0 || !addr.Addr().IsLoopback() {
		t.Fatalf("Addr %v, want 127.0.0.1:<port>", addr)
	}
	exchange(t, addr, query("node1.rack.example.", miekg.TypeA), true)
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve still running 5s after cancel")
	}
	if _, err := tryExchange(addr, query("node1.rack.example.", miekg.TypeA), true, time.Second); err == nil {
		t.Error("TCP still answered after shutdown")
	}
	// The port is free again.
	pc, err := net.ListenPacket("udp", addr.String())
	if err != nil {
		t.Errorf("UDP port still bound after shutdown: %v", err)
	} else {
		pc.Close()
	}
	if err := s.Serve(context.Background()); !errors.Is(err, ErrServing) {
		t.Errorf("second Serve: %v, want ErrServing", err)
	}
}

// ServeConns takes sockets made elsewhere; TCP alone works.
func TestServeConnsTCPOnly(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newServer(t, Config{}, newFakeZone())
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- s.ServeConns(ctx, nil, ln) }()
	<-s.Ready()
	if s.Addr().String() != ln.Addr().String() {
		t.Errorf("Addr %v, want the listener's %v", s.Addr(), ln.Addr())
	}
	if r := exchange(t, s.Addr(), query("node1.rack.example.", miekg.TypeA), true); len(r.Answer) != 1 {
		t.Errorf("over TCP: %v", r)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Errorf("ServeConns: %v", err)
	}
}

// When one socket fails to serve, Serve stops the other and says why.
func TestServeConnsFailure(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close() // Accept fails at once
	s, _ := newServer(t, Config{}, newFakeZone())
	errc := make(chan error, 1)
	go func() { errc <- s.ServeConns(t.Context(), pc, ln) }()
	select {
	case err := <-errc:
		if err == nil {
			t.Error("ServeConns returned nil with a closed listener")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ServeConns still running 5s after its listener failed")
	}
}

// counter reads a counter of the registry (0 when absent).
func counter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	m := find(t, reg, name, labels)
	if m == nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

func histogramCount(t *testing.T, reg *prometheus.Registry, name string) uint64 {
	t.Helper()
	m := find(t, reg, name, nil)
	if m == nil {
		return 0
	}
	return m.GetHistogram().GetSampleCount()
}

func find(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue next
				}
			}
			return m
		}
	}
	return nil
}

// Serving on the IPv6 loopback; the name server's address defaults to the
// listen address.
func TestIPv6Loopback(t *testing.T) {
	pc, err := net.ListenPacket("udp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	pc.Close()
	s, _ := startServer(t, Config{Listen: "[::1]:0"}, newFakeZone())
	if !s.Addr().Addr().Is6() || !s.Addr().Addr().IsLoopback() {
		t.Fatalf("Addr %v, want [::1]:<port>", s.Addr())
	}
	for _, tcp := range []bool{false, true} {
		r := exchange(t, s.Addr(), query("rack.example.", miekg.TypeNS), tcp)
		want := []string{rr(t, "ns.rack.example. 30 IN AAAA ::1")}
		if got := rrStrings(r.Extra); !slices.Equal(got, want) {
			t.Errorf("tcp=%v: glue %v, want %v", tcp, got, want)
		}
	}
}

// Zone data that is no domain name cannot go on the wire: SERVFAIL, with
// the OPT kept.
func TestUnpackableZoneData(t *testing.T) {
	z := newFakeZone()
	z.setPTR("10.0.0.66", strings.Repeat("x", 64)+".rack.example.")
	s, _ := startServer(t, Config{}, z)
	for _, edns := range []bool{false, true} {
		q := query("66.0.0.10.in-addr.arpa.", miekg.TypePTR)
		if edns {
			withEDNS(q, 1232, 0, false)
		}
		r := exchange(t, s.Addr(), q, false)
		if r.Rcode != miekg.RcodeServerFailure || len(r.Answer) != 0 || (r.IsEdns0() != nil) != edns {
			t.Errorf("edns=%v: %v, want SERVFAIL, no answer, OPT iff asked", edns, r)
		}
	}
}
