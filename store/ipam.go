package store

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"rackd/store/kv"
)

// IPAMOptions tune address management.
type IPAMOptions struct {
	// OfferHold is how long an address offered to a DHCP client is kept for
	// it before it may be offered to another. Default 30s.
	OfferHold time.Duration
	// PXELease is the lease given to network-boot clients on a dynamic
	// address (they are passing through). Default 10m.
	PXELease time.Duration
	// Quarantine is how long an address declined by a client or found in
	// use by an ARP probe is kept out of the pool. Default 1h.
	Quarantine time.Duration
	// LeaseCommitDelay spaces the commits of DHCP acknowledgements under
	// load: one waits for company until this long after the previous
	// commit (see updateLazy). Default 10ms; negative: none.
	LeaseCommitDelay time.Duration
	// LeaseCommitBatch bounds that wait by count: once this many
	// operations wait for the commit, it starts without waiting for the
	// delay. Every lease in a commit is answered in one burst when the
	// commit is durable; a burst larger than the receive buffer of the
	// relay or client it goes to (about 160 replies in Linux's default
	// 208 KiB) is partly dropped there. Under load this keeps bursts
	// about this size and commits back to back. Default 64.
	LeaseCommitBatch int
	// StickyOnCommission gives a machine's boot interface a sticky address
	// when its hardware becomes known (commissioning succeeds, or it is
	// created READY). Default on; see DefaultIPAM.
	StickyOnCommission *bool
}

// DefaultIPAM returns the defaults.
func DefaultIPAM() IPAMOptions {
	on := true
	return IPAMOptions{OfferHold: 30 * time.Second, PXELease: 10 * time.Minute, Quarantine: time.Hour,
		LeaseCommitDelay: 10 * time.Millisecond, LeaseCommitBatch: 64, StickyOnCommission: &on}
}

func (o IPAMOptions) withDefaults() IPAMOptions {
	d := DefaultIPAM()
	if o.OfferHold <= 0 {
		o.OfferHold = d.OfferHold
	}
	if o.PXELease <= 0 {
		o.PXELease = d.PXELease
	}
	if o.Quarantine <= 0 {
		o.Quarantine = d.Quarantine
	}
	if o.LeaseCommitBatch <= 0 {
		o.LeaseCommitBatch = d.LeaseCommitBatch
	}
	if o.LeaseCommitDelay == 0 {
		o.LeaseCommitDelay = d.LeaseCommitDelay
	} else if o.LeaseCommitDelay < 0 {
		o.LeaseCommitDelay = 0
	}
	if o.StickyOnCommission == nil {
		o.StickyOnCommission = d.StickyOnCommission
	}
	return o
}

// Range is an inclusive range of addresses.
type Range struct {
	Start netip.Addr `json:"start"`
	End   netip.Addr `json:"end"`
}

// Contains reports whether ip lies in r.
func (r Range) Contains(ip netip.Addr) bool {
	return r.Start.Compare(ip) <= 0 && ip.Compare(r.End) <= 0
}

// Subnet is a network rackd manages: it answers DHCP there, hands out its
// addresses and names them in DNS.
type Subnet struct {
	CIDR         netip.Prefix `json:"cidr"`
	Gateway      netip.Addr   `json:"gateway,omitzero"`
	DNSServers   []netip.Addr `json:"dns_servers,omitempty"`
	Domain       string       `json:"domain,omitempty"`
	LeaseSeconds int          `json:"lease_seconds"`
	// DynamicRanges are handed out by DHCP to clients rackd does not know
	// (new and enlisting machines). Sticky addresses and reservations made
	// without an explicit address come from the rest of the subnet.
	DynamicRanges []Range `json:"dynamic_ranges,omitempty"`
	// ReservedRanges are never handed out automatically (routers, switches,
	// other tools' addresses); an explicit reservation may still use them.
	ReservedRanges []Range   `json:"reserved_ranges,omitempty"`
	Created        time.Time `json:"created"`
}

// AddrKind is what an address is used for.
type AddrKind string

// The kinds of address: every address in use has exactly one use, of one
// of these kinds.
const (
	// KindDynamic is a DHCP lease from a dynamic range; it expires.
	KindDynamic AddrKind = "dynamic"
	// KindSticky is a machine interface's own address, kept until a human
	// changes it.
	KindSticky AddrKind = "sticky"
	// KindReserved is a user's reservation, for another tool or an
	// unmanaged device (optionally answered by DHCP for its MAC).
	KindReserved AddrKind = "reserved"
	// KindDiscovered is in use by someone rackd does not know (an ARP probe
	// answered, or a client declined it): quarantined until it expires.
	KindDiscovered AddrKind = "discovered"
)

// Address is one address in use. The addresses bucket is keyed by IP, so an
// address has exactly one use at a time, by construction.
type Address struct {
	IP        netip.Addr   `json:"ip"`
	Subnet    netip.Prefix `json:"subnet"`
	Kind      AddrKind     `json:"kind"`
	MAC       string       `json:"mac,omitempty"`
	MachineID string       `json:"machine_id,omitempty"`
	Hostname  string       `json:"hostname,omitempty"`
	Owner     string       `json:"owner,omitempty"`
	Purpose   string       `json:"purpose,omitempty"`
	Expires   time.Time    `json:"expires,omitzero"`
	Created   time.Time    `json:"created"`
}

// live reports whether a holds its address at now (expired leases and
// quarantines are free again).
func (a Address) live(now time.Time) bool {
	switch a.Kind {
	case KindDynamic, KindDiscovered:
		return now.Before(a.Expires)
	}
	return true
}

// ipamState is what address management keeps in memory: addresses offered
// but not yet requested, and where the next dynamic search starts.
type ipamState struct {
	opts IPAMOptions
	// offerMu serialises offers (which run outside the committer) so that
	// choosing a free address and holding it is one step.
	offerMu sync.Mutex
	mu      sync.Mutex
	offers  map[netip.Addr]offer
	// subnets caches the committed subnets; nil when an operation changed
	// them and the commit has not reloaded it yet. subnetsGen counts the
	// invalidations, so that a reload that read the list before one does
	// not install it (refreshSubnets); subnetsMu orders the two.
	subnets    atomic.Pointer[[]Subnet]
	subnetsGen uint64
	subnetsMu  sync.Mutex
	// subnetsChanged is closed, and replaced, whenever a reload installs
	// the list (see SubnetsChanged).
	subnetsChanged chan struct{}
	// held is the address offered to each client in each subnet, so that a
	// client that asks again (a retransmitted DHCPDISCOVER, an operation
	// replayed by the committer) is offered the same address, not another.
	held   map[heldKey]netip.Addr
	cursor map[netip.Prefix]netip.Addr
	// sweepAt is the number of offers at which hold next sweeps out the
	// expired ones (see hold); sweeps counts the sweeps.
	sweepAt int
	sweeps  int
	// macs indexes addresses by MAC (see macIndex).
	macs macIndex
	// shared: the store is on an engine with other writers, where the
	// lease_macs bucket is kept too (see bindLeaseKey). Set before the
	// store serves anything.
	shared bool
}

type heldKey struct {
	mac    string
	subnet netip.Prefix
}

type offer struct {
	mac     string
	subnet  netip.Prefix
	expires time.Time
}

func newIPAMState(o IPAMOptions) *ipamState {
	return &ipamState{opts: o.withDefaults(), offers: map[netip.Addr]offer{}, held: map[heldKey]netip.Addr{},
		cursor: map[netip.Prefix]netip.Addr{}, subnetsChanged: make(chan struct{})}
}

// drop forgets the offer of ip. st.mu is held.
func (st *ipamState) drop(ip netip.Addr) {
	o, ok := st.offers[ip]
	if !ok {
		return
	}
	delete(st.offers, ip)
	if k := (heldKey{o.mac, o.subnet}); st.held[k] == ip {
		delete(st.held, k)
	}
}

// offeredTo returns the MAC an address is being offered to, if any.
func (st *ipamState) offeredTo(ip netip.Addr, now time.Time) string {
	st.mu.Lock()
	defer st.mu.Unlock()
	o, ok := st.offers[ip]
	if !ok {
		return ""
	}
	if !now.Before(o.expires) {
		st.drop(ip)
		return ""
	}
	return o.mac
}

// heldFor returns the address being offered to mac in subnet, if any.
func (st *ipamState) heldFor(mac string, subnet netip.Prefix, now time.Time) (netip.Addr, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	ip, ok := st.held[heldKey{mac, subnet}]
	if !ok {
		return netip.Addr{}, false
	}
	o, ok := st.offers[ip]
	if !ok || o.mac != mac {
		delete(st.held, heldKey{mac, subnet}) // stale: the offer is gone or another's
		return netip.Addr{}, false
	}
	if !now.Before(o.expires) {
		st.drop(ip)
		return netip.Addr{}, false
	}
	return ip, true
}

// hold offers ip to mac in subnet, in place of what mac was offered there
// before.
func (st *ipamState) hold(ip netip.Addr, mac string, subnet netip.Prefix, now time.Time) {
	st.mu.Lock()
	defer st.mu.Unlock()
	k := heldKey{mac, subnet}
	if old, ok := st.held[k]; ok && old != ip {
		st.drop(old)
	}
	st.drop(ip)
	st.offers[ip] = offer{mac: mac, subnet: subnet, expires: now.Add(st.opts.OfferHold)}
	st.held[k] = ip
	// Forget expired offers now and then so the map cannot grow for ever:
	// when it has doubled since the last sweep. A sweep on every offer
	// past a fixed size cost a walk of the whole map per DHCPDISCOVER
	// whenever many offers were outstanding (a storm, clients whose
	// REQUEST was lost, all held for OfferHold), which is when the
	// server can least afford it; doubling makes it constant per offer.
	if len(st.offers) > max(minSweep, st.sweepAt) {
		for k, o := range st.offers {
			if !now.Before(o.expires) {
				st.drop(k)
			}
		}
		st.sweepAt = 2 * len(st.offers)
		st.sweeps++
	}
}

// minSweep is the number of offers below which expired ones are not swept
// (each is also dropped when its address or client is looked at).
const minSweep = 4096

// unhold forgets the offer of ip and whatever mac was offered in subnet.
func (st *ipamState) unhold(ip netip.Addr, mac string, subnet netip.Prefix) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.drop(ip)
	if old, ok := st.held[heldKey{mac, subnet}]; ok {
		st.drop(old)
	}
}

func ipKey(ip netip.Addr) []byte {
	b := ip.As16()
	return b[:]
}

func prefixKey(p netip.Prefix) []byte {
	return append(ipKey(p.Addr()), byte(p.Bits()))
}

var domainRE = regexp.MustCompile(`^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// normalize validates s and puts it in canonical form.
func (s *Subnet) normalize() error {
	if !s.CIDR.IsValid() {
		return errorf(CodeInvalid, "a subnet needs a CIDR like 10.0.0.0/24 or 2001:db8::/64")
	}
	if s.CIDR.Masked() != s.CIDR {
		return errorf(CodeInvalid, "CIDR %s has host bits set: did you mean %s?", s.CIDR, s.CIDR.Masked())
	}
	if s.CIDR.Addr().Is4In6() {
		return errorf(CodeInvalid, "CIDR %s: write IPv4 subnets as IPv4", s.CIDR)
	}
	in := func(what string, ip netip.Addr) error {
		if !s.CIDR.Contains(ip) {
			return errorf(CodeInvalid, "%s %s is not in %s", what, ip, s.CIDR)
		}
		return nil
	}
	if s.Gateway.IsValid() {
		if err := in("gateway", s.Gateway); err != nil {
			return err
		}
	}
	for _, d := range s.DNSServers {
		if !d.IsValid() {
			return errorf(CodeInvalid, "invalid DNS server address")
		}
	}
	s.Domain = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(s.Domain)), ".")
	if s.Domain != "" && (len(s.Domain) > 253 || !domainRE.MatchString(s.Domain)) {
		return errorf(CodeInvalid, "invalid domain %q", s.Domain)
	}
	switch {
	case s.LeaseSeconds == 0:
		s.LeaseSeconds = 3600
	case s.LeaseSeconds < 60 || s.LeaseSeconds > 365*86400:
		return errorf(CodeInvalid, "lease_seconds %d: want 60 to %d", s.LeaseSeconds, 365*86400)
	}
	all := append(slices.Clone(s.DynamicRanges), s.ReservedRanges...)
	for i, r := range all {
		if !r.Start.IsValid() || !r.End.IsValid() {
			return errorf(CodeInvalid, "a range needs start and end addresses")
		}
		if r.End.Less(r.Start) {
			return errorf(CodeInvalid, "range %s-%s ends before it starts", r.Start, r.End)
		}
		if err := in("range start", r.Start); err != nil {
			return err
		}
		if err := in("range end", r.End); err != nil {
			return err
		}
		for _, o := range all[:i] {
			if r.Start.Compare(o.End) <= 0 && o.Start.Compare(r.End) <= 0 {
				return errorf(CodeInvalid, "ranges %s-%s and %s-%s overlap", o.Start, o.End, r.Start, r.End)
			}
		}
	}
	if len(s.DynamicRanges) > 0 && s.Gateway.IsValid() {
		for _, r := range s.DynamicRanges {
			if r.Contains(s.Gateway) {
				return errorf(CodeInvalid, "the gateway %s lies in the dynamic range %s-%s", s.Gateway, r.Start, r.End)
			}
		}
	}
	return nil
}

// CreateSubnet adds a managed subnet. Overlapping subnets are refused.
func (s *Store) CreateSubnet(ctx context.Context, actor Actor, sn Subnet) (Subnet, error) {
	if !actor.Admin {
		return Subnet{}, errorf(CodeForbidden, "only an admin may add subnets")
	}
	sn.DNSServers = slices.Clone(sn.DNSServers)
	sn.DynamicRanges = slices.Clone(sn.DynamicRanges)
	sn.ReservedRanges = slices.Clone(sn.ReservedRanges)
	if err := sn.normalize(); err != nil {
		return Subnet{}, err
	}
	err := s.update(ctx, func(t *Tx) error {
		subnets, err := t.subnets()
		if err != nil {
			return err
		}
		for _, o := range subnets {
			if o.CIDR.Overlaps(sn.CIDR) {
				return errorf(CodeConflict, "subnet %s overlaps the managed subnet %s", sn.CIDR, o.CIDR)
			}
		}
		sn.Created = t.now
		// Read afresh by the operations after it in a batch, and
		// reloaded after the commit (invalidated again then: a reload
		// by another operation's commit may have read the list before
		// this one's).
		st := t.ipam
		st.invalidateSubnets()
		t.afterCommit(st.invalidateSubnets)
		return t.put(bucketSubnets, prefixKey(sn.CIDR), sn)
	})
	return sn, err
}

func (t *Tx) subnets() ([]Subnet, error) {
	// Every DHCP packet looks its subnet up: read the cached, committed
	// list unless an operation of this batch changed it.
	if t.ipam != nil {
		if c := t.ipam.subnets.Load(); c != nil {
			return *c, nil
		}
	}
	return readSubnets(t.tx)
}

// readSubnets decodes the subnets bucket.
func readSubnets(tx kv.Tx) ([]Subnet, error) {
	var out []Subnet
	err := tx.Bucket(bucketSubnets).ForEach(func(k, v []byte) error {
		var sn Subnet
		if err := json.Unmarshal(v, &sn); err != nil {
			return fmt.Errorf("decode subnet: %w", err)
		}
		out = append(out, sn)
		return nil
	})
	return out, err
}

// refreshSubnets reloads the subnets cache from the committed database
// when an operation invalidated it.
func (st *ipamState) refreshSubnets(view viewFunc) {
	if st.subnets.Load() != nil {
		return
	}
	st.subnetsMu.Lock()
	gen := st.subnetsGen
	st.subnetsMu.Unlock()
	var list []Subnet
	if err := view(func(tx kv.Tx) error {
		if tx.Bucket(bucketSubnets) == nil {
			return nil
		}
		var err error
		list, err = readSubnets(tx)
		return err
	}); err == nil {
		st.subnetsMu.Lock()
		defer st.subnetsMu.Unlock()
		if st.subnetsGen == gen {
			st.subnets.Store(&list)
			close(st.subnetsChanged)
			st.subnetsChanged = make(chan struct{})
		}
	}
}

// SubnetsChanged returns a channel closed the next time the store's list
// of subnets changes: made, changed or deleted here or, on an engine
// shared with other agents, by another agent. Whoever acts on the list
// (campaigns for the subnets a DHCP server answers) reads it again then
// instead of polling.
func (s *Store) SubnetsChanged() <-chan struct{} {
	st := s.ipam
	st.subnetsMu.Lock()
	defer st.subnetsMu.Unlock()
	return st.subnetsChanged
}

// invalidateSubnets drops the subnets cache: the next reader reads the
// database, until refreshSubnets installs a list read after this call.
func (st *ipamState) invalidateSubnets() {
	st.subnetsMu.Lock()
	defer st.subnetsMu.Unlock()
	st.subnetsGen++
	st.subnets.Store(nil)
}

// subnetFor returns the managed subnet that contains ip.
func (t *Tx) subnetFor(ip netip.Addr) (Subnet, error) {
	ip = ip.Unmap()
	subnets, err := t.subnets()
	if err != nil {
		return Subnet{}, err
	}
	for _, sn := range subnets {
		if sn.CIDR.Contains(ip) {
			return sn, nil
		}
	}
	return Subnet{}, errorf(CodeNoSubnet, "no managed subnet contains %s", ip)
}

// Subnets lists the managed subnets in address order.
func (s *Store) Subnets() ([]Subnet, error) {
	var out []Subnet
	err := s.view(func(t *Tx) error {
		var err error
		out, err = t.subnets()
		return err
	})
	return out, err
}

// SubnetFor returns the managed subnet that contains ip.
func (s *Store) SubnetFor(ip netip.Addr) (Subnet, error) {
	var sn Subnet
	err := s.view(func(t *Tx) error {
		var err error
		sn, err = t.subnetFor(ip)
		return err
	})
	return sn, err
}

// address reads the record at ip.
func (t *Tx) address(ip netip.Addr) (Address, bool, error) {
	var a Address
	found, err := t.get(bucketAddresses, ipKey(ip), &a)
	return a, found, err
}

// putAddress writes a, replacing whatever was at a.IP, and indexes it by
// MAC.
func (t *Tx) putAddress(a Address) error {
	if old, found, err := t.address(a.IP); err != nil {
		return err
	} else if found && old.MAC != "" && old.MAC != a.MAC {
		t.unindexMAC(old.MAC, old.IP)
		if err := t.bindLeaseKey(old.MAC, old.IP, false); err != nil {
			return err
		}
	}
	if a.MAC != "" {
		t.indexMAC(a.MAC, a.IP)
		if err := t.bindLeaseKey(a.MAC, a.IP, true); err != nil {
			return err
		}
	}
	return t.putRaw(bucketAddresses, ipKey(a.IP), a.appendJSON(make([]byte, 0, 256)))
}

// deleteAddress frees ip.
func (t *Tx) deleteAddress(a Address) error {
	if a.MAC != "" {
		t.unindexMAC(a.MAC, a.IP)
		if err := t.bindLeaseKey(a.MAC, a.IP, false); err != nil {
			return err
		}
	}
	return t.del(bucketAddresses, ipKey(a.IP))
}

// On an engine shared with other agents, the in-memory MAC index cannot
// order two agents' transactions: each learns of the other's bindings only
// from the watch, so two acknowledgements of different addresses for one
// MAC, committed at once by two agents, would each see none of the other's
// records and both commit. So there, the addresses bound to a MAC are also
// a record of the store: its key in the lease_macs bucket lists them
// (leaseKeyIPs), every transaction that binds an address to a MAC or
// unbinds it rewrites that key (bindLeaseKey, deleted once empty), and
// every lookup of a MAC's addresses reads it (addressesOfMAC). The engine
// compares every key a transaction read, so of two transactions that both
// change one MAC's bindings, the second conflicts and runs again on what
// the first committed. A database file has one writer, whose transactions
// run one after the other: it keeps no such bucket.

// leaseKeyIPs returns the addresses mac's key in the lease_macs bucket
// lists (none on a database file).
func (t *Tx) leaseKeyIPs(mac string) ([]netip.Addr, error) {
	if !t.ipam.shared {
		return nil, nil
	}
	b := t.bucket(bucketLeaseMACs)
	if b == nil {
		return nil, nil
	}
	return decodeLeaseKey(mac, b.Get([]byte(mac)))
}

// decodeLeaseKey decodes a lease_macs value: 16-byte addresses, one after
// the other.
func decodeLeaseKey(mac string, v []byte) ([]netip.Addr, error) {
	if len(v)%16 != 0 {
		return nil, fmt.Errorf("lease_macs/%s: %d bytes, not a list of 16-byte addresses", mac, len(v))
	}
	ips := make([]netip.Addr, 0, len(v)/16)
	for i := 0; i < len(v); i += 16 {
		ips = append(ips, netip.AddrFrom16([16]byte(v[i:i+16])).Unmap())
	}
	return ips, nil
}

// bindLeaseKey records, on a shared engine, that ip is bound to mac (or no
// longer, bound false) in mac's lease_macs key; a key that would list
// nothing is deleted. An unchanged list is not written again (a renewal):
// whatever changes mac's bindings concurrently changes the record renewed
// too.
func (t *Tx) bindLeaseKey(mac string, ip netip.Addr, bound bool) error {
	if !t.ipam.shared {
		return nil
	}
	b := t.bucket(bucketLeaseMACs)
	if b == nil {
		if !bound {
			return nil
		}
		var err error
		if b, err = t.tx.CreateBucketIfNotExists(bucketLeaseMACs); err != nil {
			return err
		}
		t.dirty = true
	}
	ips, err := decodeLeaseKey(mac, b.Get([]byte(mac)))
	if err != nil {
		return err
	}
	i := slices.Index(ips, ip)
	switch {
	case bound && i >= 0, !bound && i < 0:
		return nil
	case bound:
		ips = append(ips, ip)
		slices.SortFunc(ips, netip.Addr.Compare)
	default:
		ips = slices.Delete(ips, i, i+1)
	}
	if len(ips) == 0 {
		return t.del(bucketLeaseMACs, []byte(mac))
	}
	v := make([]byte, 0, 16*len(ips))
	for _, a := range ips {
		v = append(v, ipKey(a)...)
	}
	return t.putRaw(bucketLeaseMACs, []byte(mac), v)
}

// The MAC index (macIndex) may hold more than the database (an entry added
// by an operation whose commit failed, or not committed yet) but never
// less than any transaction can see: entries are added at once and again
// after the commit, removed only after the commit (in operation order, so
// a removal and a re-adding in one batch end added), and every lookup
// checks the candidates against the transaction's own records.

//
// On an engine shared with other agents the operation reports, after its
// commit, the MAC each address it wrote ends with, at the commit's revision,
// which orders it against what the watch reports (macIndex.set).

func (t *Tx) indexMAC(mac string, ip netip.Addr) {
	st := t.ipam
	st.macs.add(mac, ip)
	if t.setMAC(ip, mac) {
		return
	}
	t.afterCommit(func() { st.macs.add(mac, ip) })
}

func (t *Tx) unindexMAC(mac string, ip netip.Addr) {
	if t.setMAC(ip, "") {
		return
	}
	st := t.ipam
	t.afterCommit(func() { st.macs.del(mac, ip) })
}

// setMAC notes, on a shared engine, that ip ends this operation bound to
// mac ("": to none); it reports false on a database file.
func (t *Tx) setMAC(ip netip.Addr, mac string) bool {
	c := t.commit
	if c == nil || !c.shared {
		return false
	}
	if t.macs == nil {
		t.macs = map[netip.Addr]string{}
		st, macs := t.ipam, t.macs
		t.afterCommit(func() {
			for ip, mac := range macs {
				st.macs.set(ip, mac, c.rev)
			}
		})
	}
	t.macs[ip] = mac
	return true
}

// addressesOfMAC returns every address record bound to mac, by address:
// the candidates are the MAC index's and, on a shared engine, those of
// mac's lease_macs key, which the commit compares (see bindLeaseKey).
func (t *Tx) addressesOfMAC(mac string) ([]Address, error) {
	cands := t.ipam.macs.get(mac)
	if t.ipam.shared {
		bound, err := t.leaseKeyIPs(mac)
		if err != nil {
			return nil, err
		}
		for _, ip := range bound {
			if !slices.Contains(cands, ip) {
				cands = append(cands, ip)
			}
		}
	}
	var out []Address
	for _, ip := range cands {
		a, found, err := t.address(ip)
		if err != nil {
			return nil, err
		}
		if found && a.MAC == mac {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(x, y Address) int { return x.IP.Compare(y.IP) })
	return out, nil
}

// macIndex maps a MAC to the addresses bound to it. It lives in memory,
// rebuilt from the addresses bucket on open (loadMACs), because as a bucket
// every DHCP acknowledgement dirtied one more page at a random place of it
// (clients' MACs are random), and bbolt writes each dirty page with a
// system call of its own.
//
// On an engine shared with other agents (follow.go) the index also keeps,
// for each address, the MAC its record has and the revision that record is
// as of (set): the watch and the store's own commits both report records,
// in whatever order they arrive, and news older than what an address's
// entry reflects is ignored, so an entry never goes back in time.
type macIndex struct {
	mu sync.RWMutex
	m  map[string][]netip.Addr
	// owner and rev: see set.
	owner map[netip.Addr]string
	rev   map[netip.Addr]int64
}

// set records that ip's record has mac ("" for none or no record) as of
// engine revision rev, unless the entry already reflects a later one.
func (x *macIndex) set(ip netip.Addr, mac string, rev int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.rev == nil {
		x.owner, x.rev = map[netip.Addr]string{}, map[netip.Addr]int64{}
	}
	if rev <= x.rev[ip] {
		return
	}
	x.rev[ip] = rev
	if old, ok := x.owner[ip]; ok && old != mac {
		x.delLocked(old, ip)
	}
	if mac == "" {
		delete(x.owner, ip)
		return
	}
	x.owner[ip] = mac
	x.addLocked(mac, ip)
}

// load replaces the index with the records read at engine revision rev
// (ip -> mac), keeping the entries already newer than that.
func (x *macIndex) load(recs map[netip.Addr]string, rev int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	m, owner, revs := map[string][]netip.Addr{}, map[netip.Addr]string{}, map[netip.Addr]int64{}
	for ip, r := range x.rev {
		if r > rev {
			revs[ip] = r
			if mac, ok := x.owner[ip]; ok {
				owner[ip] = mac
			}
		}
	}
	for ip, mac := range recs {
		if _, newer := revs[ip]; !newer {
			owner[ip], revs[ip] = mac, rev
		}
	}
	for ip, mac := range owner {
		m[mac] = append(m[mac], ip)
	}
	x.m, x.owner, x.rev = m, owner, revs
}

func (x *macIndex) add(mac string, ip netip.Addr) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.addLocked(mac, ip)
}

func (x *macIndex) addLocked(mac string, ip netip.Addr) {
	if x.m == nil {
		x.m = map[string][]netip.Addr{}
	}
	if !slices.Contains(x.m[mac], ip) {
		x.m[mac] = append(x.m[mac], ip)
	}
}

func (x *macIndex) del(mac string, ip netip.Addr) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.delLocked(mac, ip)
}

func (x *macIndex) delLocked(mac string, ip netip.Addr) {
	ips := x.m[mac]
	i := slices.Index(ips, ip)
	if i < 0 {
		return
	}
	if len(ips) == 1 {
		delete(x.m, mac)
		return
	}
	x.m[mac] = slices.Delete(slices.Clone(ips), i, i+1)
}

// get returns the candidates for mac (a copy).
func (x *macIndex) get(mac string) []netip.Addr {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return slices.Clone(x.m[mac])
}

// has reports whether mac -> ip is indexed.
func (x *macIndex) has(mac string, ip netip.Addr) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return slices.Contains(x.m[mac], ip)
}

// loadMACs builds the MAC index from the addresses bucket.
func (st *ipamState) loadMACs(view viewFunc) error {
	return view(func(tx kv.Tx) error {
		return forEachAddressMAC(tx, st.macs.add)
	})
}

// forEachAddressMAC calls fn for every address record bound to a MAC.
func forEachAddressMAC(tx kv.Tx, fn func(mac string, ip netip.Addr)) error {
	b := tx.Bucket(bucketAddresses)
	if b == nil {
		return nil
	}
	return b.ForEach(func(k, v []byte) error {
		var r struct {
			IP  netip.Addr `json:"ip"`
			MAC string     `json:"mac"`
		}
		if err := json.Unmarshal(v, &r); err != nil {
			return fmt.Errorf("address %x: %w", k, err)
		}
		if r.MAC != "" {
			fn(r.MAC, r.IP)
		}
		return nil
	})
}

// usable reports whether ip may be handed out automatically in sn: not the
// network or broadcast address, not the gateway or a DNS server of the
// subnet.
func (sn Subnet) usable(ip netip.Addr) bool {
	if !sn.CIDR.Contains(ip) || ip == sn.CIDR.Addr() || ip == sn.Gateway || slices.Contains(sn.DNSServers, ip) {
		return false
	}
	if ip.Is4() && sn.CIDR.Bits() < 31 && ip == lastAddr(sn.CIDR) {
		return false // the broadcast address
	}
	return true
}

func (sn Subnet) inDynamic(ip netip.Addr) bool {
	for _, r := range sn.DynamicRanges {
		if r.Contains(ip) {
			return true
		}
	}
	return false
}

func (sn Subnet) inReserved(ip netip.Addr) bool {
	for _, r := range sn.ReservedRanges {
		if r.Contains(ip) {
			return true
		}
	}
	return false
}

// lastAddr is the highest address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	bits := p.Bits()
	for i := range b {
		for j := 0; j < 8; j++ {
			if i*8+j >= bits {
				b[i] |= 0x80 >> j
			}
		}
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// freeAt reports whether ip is free for mac at now: no live record holds it
// and it is not offered to another client.
func (t *Tx) freeAt(st *ipamState, ip netip.Addr, mac string) (bool, error) {
	a, found, err := t.address(ip)
	if err != nil {
		return false, err
	}
	if found && a.live(t.now) && a.MAC != mac {
		return false, nil
	}
	if found && a.live(t.now) && a.Kind != KindDynamic {
		return false, nil // a sticky/reserved address of this MAC is not "free"
	}
	if to := st.offeredTo(ip, t.now); to != "" && to != mac {
		return false, nil
	}
	return true, nil
}

// maxScan bounds one search for a free address, so that a full /8 cannot
// stall the committer.
const maxScan = 1 << 16

// nextDynamic finds a free address in sn's dynamic ranges, starting after
// the last one handed out so that a released address is not reused at once.
func (t *Tx) nextDynamic(st *ipamState, sn Subnet, mac string) (netip.Addr, error) {
	var total uint64
	for _, r := range sn.DynamicRanges {
		total += rangeSize(r)
	}
	st.mu.Lock()
	start, ok := st.cursor[sn.CIDR]
	st.mu.Unlock()
	if !ok || !sn.inDynamic(start) {
		start = sn.DynamicRanges[0].Start
	}
	ip := start
	for n := uint64(0); n < total && n < maxScan; n++ {
		if sn.usable(ip) {
			free, err := t.freeAt(st, ip, mac)
			if err != nil {
				return netip.Addr{}, err
			}
			if free {
				st.mu.Lock()
				st.cursor[sn.CIDR] = nextInRanges(sn.DynamicRanges, ip)
				st.mu.Unlock()
				return ip, nil
			}
		}
		ip = nextInRanges(sn.DynamicRanges, ip)
	}
	return netip.Addr{}, errorf(CodeExhausted, "no free address in the dynamic ranges of %s", sn.CIDR)
}

// nextStatic finds a free address of sn outside its dynamic and reserved
// ranges, lowest first, for sticky addresses and reservations.
func (t *Tx) nextStatic(st *ipamState, sn Subnet) (netip.Addr, error) {
	ip := sn.CIDR.Addr().Next()
	for n := 0; n < maxScan && sn.CIDR.Contains(ip); n++ {
		if sn.usable(ip) && !sn.inDynamic(ip) && !sn.inReserved(ip) {
			free, err := t.freeAt(st, ip, "")
			if err != nil {
				return netip.Addr{}, err
			}
			if free {
				return ip, nil
			}
		}
		ip = ip.Next()
	}
	return netip.Addr{}, errorf(CodeExhausted, "no free static address in %s outside its dynamic and reserved ranges", sn.CIDR)
}

func rangeSize(r Range) uint64 {
	a, b := r.Start.As16(), r.End.As16()
	var x, y uint64
	for i := 8; i < 16; i++ {
		x = x<<8 | uint64(a[i])
		y = y<<8 | uint64(b[i])
	}
	if y < x {
		return 0
	}
	if y-x == ^uint64(0) {
		return y - x
	}
	return y - x + 1
}

// nextInRanges is the address after ip, wrapping from one range to the next
// and from the last to the first.
func nextInRanges(rs []Range, ip netip.Addr) netip.Addr {
	for i, r := range rs {
		if r.Contains(ip) {
			if n := ip.Next(); n.IsValid() && r.Contains(n) {
				return n
			}
			return rs[(i+1)%len(rs)].Start
		}
	}
	return rs[0].Start
}
