package store

import (
	"context"
	"encoding/json"
	"net/netip"
	"slices"
	"time"

	"rackd/store/kv"
)

// LeaseRequest is a DHCP client's ask, as the DHCP server hands it over.
type LeaseRequest struct {
	MAC string
	// Link selects the subnet: the relay's address, or the address of the
	// interface the request came in on.
	Link netip.Addr
	// IP is the address the client asks for (requested address or ciaddr).
	IP       netip.Addr
	Hostname string
	// PXE marks network-boot firmware and loaders: on a dynamic address they
	// get the short PXE lease.
	PXE bool
}

// Grant is the answer to a lease request: an address and its subnet.
type Grant struct {
	Address   Address
	Subnet    Subnet
	LeaseTime time.Duration
	// Name is the client's name in rackd (a machine's hostname, a
	// reservation's), for option 12.
	Name string
	// Probe: the address is newly chosen from a dynamic range and must be
	// probed on-link before it is offered.
	Probe bool
}

// preferred picks, among the records bound to mac, the one that answers
// mac in sn: its sticky address, then its reservation, then its dynamic
// lease (even expired: a client gets its old address back when it is free).
func preferred(recs []Address, sn Subnet) (Address, bool) {
	rank := map[AddrKind]int{KindSticky: 0, KindReserved: 1, KindDynamic: 2}
	best, found := Address{}, false
	for _, a := range recs {
		r, ok := rank[a.Kind]
		if !ok || a.Subnet != sn.CIDR {
			continue
		}
		if !found || r < rank[best.Kind] {
			best, found = a, true
		}
	}
	return best, found
}

func (t *Tx) grant(st *ipamState, a Address, sn Subnet, req LeaseRequest, probe bool) (Grant, error) {
	g := Grant{Address: a, Subnet: sn, LeaseTime: time.Duration(sn.LeaseSeconds) * time.Second, Probe: probe}
	switch a.Kind {
	case KindSticky:
		if m, err := t.machine(a.MachineID); err == nil {
			g.Name = m.Hostname
		}
	case KindReserved:
		g.Name = a.Hostname
	default:
		if req.PXE && st.opts.PXELease < g.LeaseTime {
			g.LeaseTime = st.opts.PXELease
		}
	}
	return g, nil
}

// DHCPOffer chooses the address to offer mac (DHCPDISCOVER): its sticky
// address, its reservation, its previous lease, the address it asks for if
// free, or the next free dynamic address. Nothing is written: the address is
// held in memory for the client for IPAMOptions.OfferHold.
func (s *Store) DHCPOffer(ctx context.Context, req LeaseRequest) (Grant, error) {
	mac, err := NormalizeMAC(req.MAC)
	if err != nil {
		return Grant{}, err
	}
	var g Grant
	// An offer writes nothing, so it runs in a read transaction of its own
	// rather than in the committer: no wait for a group commit, no write
	// transaction. offerMu makes choosing and holding one step, so that two
	// offers never pick the same address. What the read transaction cannot
	// see yet (a lease being committed) is still held in memory: a binding's
	// hold is dropped only after its commit (see DHCPAck).
	st := s.ipam
	st.offerMu.Lock()
	defer st.offerMu.Unlock()
	if err := ctx.Err(); err != nil {
		return Grant{}, err
	}
	// The offer's reads may come from a copy a little behind (on a shared
	// engine): the acknowledgement checks the address in its commit.
	err = s.viewMirrored(func(t *Tx) error {
		sn, err := t.subnetFor(req.Link)
		if err != nil {
			return err
		}
		recs, err := t.addressesOfMAC(mac)
		if err != nil {
			return err
		}
		if a, ok := preferred(recs, sn); ok {
			if a.Kind != KindDynamic {
				g, err = t.grant(st, a, sn, req, false)
				return err
			}
			if free, err := t.freeAt(st, a.IP, mac); err != nil {
				return err
			} else if free && sn.inDynamic(a.IP) {
				st.hold(a.IP, mac, sn.CIDR, t.now)
				// It was this client's: no need to probe again unless
				// it has been away long enough for someone to squat it.
				g, err = t.grant(st, a, sn, req, !a.live(t.now))
				return err
			}
		}
		if len(sn.DynamicRanges) == 0 {
			return errorf(CodeExhausted, "subnet %s has no dynamic range and %s has no address there", sn.CIDR, mac)
		}
		ip := netip.Addr{}
		if r := req.IP.Unmap(); r.IsValid() && sn.inDynamic(r) && sn.usable(r) {
			if free, err := t.freeAt(st, r, mac); err != nil {
				return err
			} else if free {
				ip = r
			}
		}
		if h, ok := st.heldFor(mac, sn.CIDR, t.now); !ip.IsValid() && ok && sn.inDynamic(h) && sn.usable(h) {
			// Asking again: the address already offered to it.
			if free, err := t.freeAt(st, h, mac); err != nil {
				return err
			} else if free {
				ip = h
			}
		}
		if !ip.IsValid() {
			if ip, err = t.nextDynamic(st, sn, mac); err != nil {
				return err
			}
		}
		st.hold(ip, mac, sn.CIDR, t.now)
		a := Address{IP: ip, Subnet: sn.CIDR, Kind: KindDynamic, MAC: mac, Hostname: req.Hostname}
		g, err = t.grant(st, a, sn, req, true)
		return err
	})
	return g, err
}

// DHCPAck binds the address a client requests (DHCPREQUEST) and returns
// once the lease is durable. A refusal the client must hear as DHCPNAK has
// CodeNak; CodeNoSubnet means the request is not for us.
func (s *Store) DHCPAck(ctx context.Context, req LeaseRequest) (Grant, error) {
	fn, g, err := s.dhcpAck(req)
	if err != nil {
		return Grant{}, err
	}
	err = s.updateLazy(kv.WithMirroredReads(ctx), s.leasePatience(), fn)
	return *g, err
}

// DHCPAckAsync is DHCPAck for a caller that does not wait: done is called
// with the outcome once the lease is durable (or refused), on the store's
// committer goroutine, so it must be quick and must not block. The error
// is for a request that could not be queued; done is then not called.
func (s *Store) DHCPAckAsync(ctx context.Context, req LeaseRequest, done func(Grant, error)) error {
	fn, g, err := s.dhcpAck(req)
	if err != nil {
		return err
	}
	return s.updateAsync(kv.WithMirroredReads(ctx), s.leasePatience(), fn, func(err error) {
		if err != nil {
			done(Grant{}, err)
			return
		}
		done(*g, nil)
	})
}

// leasePatience is how long, and for how many others, a DHCP
// acknowledgement waits to share its commit.
func (s *Store) leasePatience() patience {
	return patience{delay: s.ipam.opts.LeaseCommitDelay, batch: s.ipam.opts.LeaseCommitBatch, group: groupLease}
}

// dhcpAck is the operation of DHCPAck and where it puts the grant.
func (s *Store) dhcpAck(req LeaseRequest) (func(*Tx) error, *Grant, error) {
	mac, err := NormalizeMAC(req.MAC)
	if err != nil {
		return nil, nil, err
	}
	ip := req.IP.Unmap()
	var g Grant
	// seen is the addresses bound to mac in the subnet when the operation
	// first ran; ran says it has.
	var (
		seen []netip.Addr
		ran  bool
	)
	fn := func(t *Tx) error {
		sn, err := t.subnetFor(req.Link)
		if err != nil {
			return err
		}
		if !ip.IsValid() {
			return errorf(CodeNak, "no address requested")
		}
		if !sn.CIDR.Contains(ip) {
			return errorf(CodeNak, "%s is not on this network (%s)", ip, sn.CIDR)
		}
		recs, err := t.addressesOfMAC(mac)
		if err != nil {
			return err
		}
		// Run again (a conflict), the operation finds mac bound to an
		// address it was not bound to at the first run: another
		// acknowledgement for the same client committed meanwhile (on a
		// shared engine, another agent's: a leader that was deposed and
		// does not know it yet). Two acknowledgements for one client at
		// once are never both granted: the one that committed first
		// stands, this one is refused. Moving the lease instead would
		// take the address back from under an ACK already sent.
		for _, a := range recs {
			if a.Subnet != sn.CIDR || a.IP == ip {
				continue
			}
			if ran && !slices.Contains(seen, a.IP) {
				if a.Kind != KindDynamic {
					return errorf(CodeNak, "%s was given its %s address %s while this acknowledgement of %s ran", mac, a.Kind, a.IP, ip)
				}
				return errorf(CodeNak, "%s was bound to %s by another acknowledgement while this one for %s ran: refused, one lease per client", mac, a.IP, ip)
			}
			if !ran {
				seen = append(seen, a.IP)
			}
		}
		ran = true
		st := s.ipam
		if a, ok := preferred(recs, sn); ok && a.Kind != KindDynamic {
			// A known client gets exactly its own address.
			if a.IP != ip {
				return errorf(CodeNak, "%s belongs to %s; %s asked for %s", mac, a.IP, mac, ip)
			}
			g, err = t.grant(st, a, sn, req, false)
			return err
		}
		cur, found, err := t.address(ip)
		if err != nil {
			return err
		}
		if found && cur.live(t.now) && (cur.Kind != KindDynamic || cur.MAC != mac) {
			return errorf(CodeNak, "%s is in use (%s)", ip, cur.Kind)
		}
		if !sn.inDynamic(ip) || !sn.usable(ip) {
			return errorf(CodeNak, "%s is not a dynamic address of %s", ip, sn.CIDR)
		}
		if to := st.offeredTo(ip, t.now); to != "" && to != mac {
			return errorf(CodeNak, "%s is being offered to another client", ip)
		}
		// One dynamic lease per client and subnet: moving drops the old one.
		for _, old := range recs {
			if old.Kind == KindDynamic && old.Subnet == sn.CIDR && old.IP != ip {
				if err := t.deleteAddress(old); err != nil {
					return err
				}
			}
		}
		a := Address{IP: ip, Subnet: sn.CIDR, Kind: KindDynamic, MAC: mac, Hostname: req.Hostname, Created: t.now}
		if found && cur.Kind == KindDynamic && cur.MAC == mac {
			a.Created = cur.Created
		}
		g, err = t.grant(st, a, sn, req, false)
		if err != nil {
			return err
		}
		a.Expires = t.now.Add(g.LeaseTime)
		g.Address = a
		if err := t.putAddress(a); err != nil {
			return err
		}
		// Offers are chosen from read transactions, which see this lease
		// only once it is committed: until then the hold keeps it.
		t.afterCommit(func() { st.unhold(ip, mac, sn.CIDR) })
		return nil
	}
	return fn, &g, nil
}

// DHCPRelease ends mac's lease on ip (DHCPRELEASE). Anything else at ip is
// left alone: a client cannot release what is not its lease.
func (s *Store) DHCPRelease(ctx context.Context, mac string, ip netip.Addr) error {
	mac, err := NormalizeMAC(mac)
	if err != nil {
		return err
	}
	return s.update(ctx, func(t *Tx) error {
		a, found, err := t.address(ip.Unmap())
		if err != nil || !found || a.Kind != KindDynamic || a.MAC != mac {
			return err
		}
		return t.deleteAddress(a)
	})
}

// Quarantine marks ip as in use by someone rackd does not know (a client
// declined it, or an ARP probe was answered by by) until the quarantine
// expires. A sticky address or a reservation is never overwritten: those are
// a human's to fix.
func (s *Store) Quarantine(ctx context.Context, ip netip.Addr, by, reason string) error {
	if by != "" {
		var err error
		if by, err = NormalizeMAC(by); err != nil {
			by = ""
		}
	}
	return s.quarantine(ctx, ip, by, reason, "")
}

// quarantine is Quarantine; a decliner may only quarantine its own lease or
// a free address, which is checked in the same transaction.
func (s *Store) quarantine(ctx context.Context, ip netip.Addr, by, reason, decliner string) error {
	ip = ip.Unmap()
	return s.update(ctx, func(t *Tx) error {
		sn, err := t.subnetFor(ip)
		if err != nil {
			return err
		}
		cur, found, err := t.address(ip)
		if err != nil {
			return err
		}
		if found && cur.live(t.now) && (cur.Kind == KindSticky || cur.Kind == KindReserved) {
			return errorf(CodeIPInUse, "%s is a %s address; it is not quarantined", ip, cur.Kind)
		}
		if decliner != "" && found && cur.live(t.now) && cur.MAC != decliner {
			return errorf(CodeIPInUse, "%s declined %s, which is not its lease", decliner, ip)
		}
		t.afterCommit(func() { s.ipam.unhold(ip, "", sn.CIDR) })
		return t.putAddress(Address{IP: ip, Subnet: sn.CIDR, Kind: KindDiscovered, MAC: by, Purpose: reason,
			Expires: t.now.Add(s.ipam.opts.Quarantine), Created: t.now})
	})
}

// DHCPDecline quarantines ip, which mac found in use (DHCPDECLINE), if it
// was mac's lease or free.
func (s *Store) DHCPDecline(ctx context.Context, mac string, ip netip.Addr) error {
	mac, err := NormalizeMAC(mac)
	if err != nil {
		return err
	}
	return s.quarantine(ctx, ip, "", "declined by "+mac, mac)
}

// Leases lists the live dynamic leases, by address.
func (s *Store) Leases() ([]Address, error) {
	return s.Addresses(func(a Address) bool { return a.Kind == KindDynamic })
}

// Addresses lists the live address records that keep returns true for, by
// address.
func (s *Store) Addresses(keep func(Address) bool) ([]Address, error) {
	var out []Address
	err := s.view(func(t *Tx) error {
		return t.tx.Bucket(bucketAddresses).ForEach(func(k, v []byte) error {
			var a Address
			if err := json.Unmarshal(v, &a); err != nil {
				return err
			}
			if a.live(t.now) && (keep == nil || keep(a)) {
				out = append(out, a)
			}
			return nil
		})
	})
	return out, err
}

// ExpireAddresses deletes expired leases and quarantines, so that listings
// and the database stay small. Handing out addresses does not depend on it:
// an expired record is free already.
//
// On a shared engine it deletes expireChunk records a transaction, in as
// many as it takes: etcd bounds the operations of one (each deletion is
// about three) and would refuse the whole sweep of a busy subnet.
func (s *Store) ExpireAddresses(ctx context.Context) (int, error) {
	limit := 0 // none
	if s.ipam.shared {
		limit = expireChunk
	}
	total := 0
	for {
		n := 0
		err := s.update(ctx, func(t *Tx) error {
			n = 0
			var dead []Address
			err := t.tx.Bucket(bucketAddresses).ForEach(func(k, v []byte) error {
				var a Address
				if err := json.Unmarshal(v, &a); err != nil {
					return err
				}
				if !a.live(t.now) && (limit == 0 || len(dead) < limit) {
					dead = append(dead, a)
				}
				return nil
			})
			if err != nil {
				return err
			}
			for _, a := range dead {
				if err := t.deleteAddress(a); err != nil {
					return err
				}
			}
			n = len(dead)
			return nil
		})
		if err != nil {
			return total, err
		}
		total += n
		if limit == 0 || n < limit {
			return total, nil
		}
	}
}

// expireChunk is how many records one transaction of ExpireAddresses
// deletes on a shared engine: a deletion costs a write and a comparison of
// the record's MAC key and a write of it, within etcd's default 128
// operations a transaction.
const expireChunk = 32

// PoolUsage returns, per subnet, how many addresses its dynamic ranges hold
// and how many of them are in use.
func (s *Store) PoolUsage() (map[netip.Prefix][2]uint64, error) {
	out := map[netip.Prefix][2]uint64{}
	subnets, err := s.Subnets()
	if err != nil {
		return nil, err
	}
	used, err := s.Addresses(nil)
	if err != nil {
		return nil, err
	}
	for _, sn := range subnets {
		var size, n uint64
		for _, r := range sn.DynamicRanges {
			size += rangeSize(r)
		}
		for _, a := range used {
			if a.Subnet == sn.CIDR && sn.inDynamic(a.IP) {
				n++
			}
		}
		out[sn.CIDR] = [2]uint64{size, n}
	}
	return out, nil
}
