package store

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// ReserveRequest asks for a user reservation: an address set aside for
// another tool, or for an unmanaged device that DHCP should answer (MAC) and
// DNS should name (Hostname).
type ReserveRequest struct {
	// IP asks for this address; otherwise Subnet's first free static one.
	IP       netip.Addr
	Subnet   netip.Prefix
	MAC      string
	Hostname string
	Purpose  string
}

// Reserve makes a user reservation in one transaction. An address that is
// held (a machine's, another reservation, a live lease of another device, a
// quarantined one) is never taken: CodeIPInUse.
func (s *Store) Reserve(ctx context.Context, actor Actor, req ReserveRequest) (Address, error) {
	if req.MAC != "" {
		mac, err := NormalizeMAC(req.MAC)
		if err != nil {
			return Address{}, err
		}
		req.MAC = mac
	}
	req.Hostname = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(req.Hostname)), ".")
	if req.Hostname != "" && !hostnameRE.MatchString(req.Hostname) {
		return Address{}, errorf(CodeInvalid, "invalid hostname %q", req.Hostname)
	}
	if len(req.Purpose) > 256 {
		return Address{}, errorf(CodeInvalid, "purpose is too long (at most 256 bytes)")
	}
	if !req.IP.IsValid() && !req.Subnet.IsValid() {
		return Address{}, errorf(CodeInvalid, "give an ip or a subnet to reserve from")
	}
	var a Address
	err := s.update(ctx, func(t *Tx) error {
		var sn Subnet
		var err error
		if req.IP.IsValid() {
			if sn, err = t.subnetFor(req.IP); err != nil {
				return errorf(CodeInvalid, "%s", err.Error())
			}
			if req.Subnet.IsValid() && req.Subnet != sn.CIDR {
				return errorf(CodeInvalid, "%s is not in %s", req.IP, req.Subnet)
			}
		} else {
			found := false
			subnets, err := t.subnets()
			if err != nil {
				return err
			}
			for _, c := range subnets {
				if c.CIDR == req.Subnet.Masked() {
					sn, found = c, true
				}
			}
			if !found {
				return errorf(CodeNotFound, "subnet %s is not managed", req.Subnet)
			}
		}
		if req.MAC != "" {
			if id := t.getRaw(bucketMACs, []byte(req.MAC)); id != nil {
				return errorf(CodeConflict, "MAC %s belongs to machine %s: give the machine an address instead", req.MAC, id)
			}
			recs, err := t.addressesOfMAC(req.MAC)
			if err != nil {
				return err
			}
			for _, r := range recs {
				if r.Kind == KindReserved && r.Subnet == sn.CIDR {
					return errorf(CodeConflict, "MAC %s already has the reservation %s in %s", req.MAC, r.IP, sn.CIDR)
				}
			}
		}
		if req.Hostname != "" {
			if taken, err := t.nameTaken(req.Hostname, sn.Domain); err != nil {
				return err
			} else if taken != "" {
				return errorf(CodeConflict, "the name %s is already used by %s", req.Hostname, taken)
			}
		}
		ip := req.IP.Unmap()
		if ip.IsValid() {
			cur, found, err := t.address(ip)
			if err != nil {
				return err
			}
			// A device's own live lease may become its reservation.
			ownLease := found && cur.Kind == KindDynamic && req.MAC != "" && cur.MAC == req.MAC
			if found && cur.live(t.now) && !ownLease {
				return errorf(CodeIPInUse, "%s is in use (%s%s)", ip, cur.Kind, holder(cur))
			}
			if to := s.ipam.offeredTo(ip, t.now); to != "" && to != req.MAC {
				return errorf(CodeIPInUse, "%s is being offered to %s by DHCP", ip, to)
			}
			if ip == sn.CIDR.Addr() || (ip.Is4() && sn.CIDR.Bits() < 31 && ip == lastAddr(sn.CIDR)) {
				return errorf(CodeInvalid, "%s is the network or broadcast address of %s", ip, sn.CIDR)
			}
		} else if ip, err = t.nextStatic(s.ipam, sn); err != nil {
			return err
		}
		a = Address{IP: ip, Subnet: sn.CIDR, Kind: KindReserved, MAC: req.MAC, Hostname: req.Hostname,
			Owner: actor.Name, Purpose: req.Purpose, Created: t.now}
		return t.putAddress(a)
	})
	return a, err
}

func holder(a Address) string {
	switch {
	case a.MachineID != "":
		return ", machine " + a.MachineID
	case a.Owner != "":
		return ", reserved by " + a.Owner
	case a.MAC != "":
		return ", " + a.MAC
	}
	return ""
}

// nameTaken says who already answers to host in domain: a machine with
// that hostname, or another named reservation.
func (t *Tx) nameTaken(host, domain string) (string, error) {
	if id := t.getRaw(bucketHostnames, []byte(host)); id != nil {
		return "machine " + string(id), nil
	}
	subnets, err := t.subnets()
	if err != nil {
		return "", err
	}
	domainOf := map[netip.Prefix]string{}
	for _, sn := range subnets {
		domainOf[sn.CIDR] = sn.Domain
	}
	taken := ""
	err = t.tx.Bucket(bucketAddresses).ForEach(func(_, v []byte) error {
		var a Address
		if err := json.Unmarshal(v, &a); err != nil {
			return err
		}
		// A name is a name within its domain: sw1 may exist in two.
		if a.Kind == KindReserved && a.Hostname == host && domainOf[a.Subnet] == domain {
			taken = "the reservation " + a.IP.String()
		}
		return nil
	})
	return taken, err
}

// Unreserve deletes a user reservation (its owner or an admin).
func (s *Store) Unreserve(ctx context.Context, actor Actor, ip netip.Addr) (Address, error) {
	var a Address
	err := s.update(ctx, func(t *Tx) error {
		cur, found, err := t.address(ip.Unmap())
		if err != nil {
			return err
		}
		if !found || cur.Kind != KindReserved {
			return errorf(CodeNotFound, "%s is not reserved", ip)
		}
		if !actor.Admin && cur.Owner != actor.Name {
			return errorf(CodeForbidden, "the reservation %s is %s's: only they or an admin may release it", ip, cur.Owner)
		}
		a = cur
		return t.deleteAddress(cur)
	})
	return a, err
}

// AssignRequest gives a machine's interface an address.
type AssignRequest struct {
	Machine string // id or hostname
	MAC     string // the interface; it must be one of the machine's
	// IP asks for this address; otherwise the first free static address of
	// Subnet (or of the subnet the interface has a lease in, or of the only
	// managed subnet).
	IP     netip.Addr
	Subnet netip.Prefix
	// Alias adds the address next to the interface's others; without it the
	// new address replaces the interface's sticky address in that subnet,
	// which goes back to the pool (and the event says so).
	Alias bool
	// KeepCurrent, for a request of no particular address and no alias,
	// answers it with the sticky address the interface has (in Subnet, when
	// given; in any subnet otherwise) if it has one, changing nothing: asked
	// twice, such a request gives one address. Without it such a request
	// replaces the interface's address with the next free one.
	KeepCurrent bool
	// Candidate, when IP is not given, is the address to take if the
	// interface needs a new one: the caller has checked it (ARP-probed
	// what AssignCandidate proposed). Without it the store takes the next
	// free static address.
	Candidate netip.Addr
	Reason    string
}

// Assignment says what AssignMachineAddress did.
type Assignment struct {
	Address Address
	// Existing: the request asked to keep the current address
	// (KeepCurrent) and the interface had one, which is the answer;
	// nothing changed.
	Existing bool
}

// AssignMachineIP gives one of a machine's interfaces a sticky address, in
// one transaction, with an event on the machine (AssignMachineAddress
// without saying whether the address was there already).
func (s *Store) AssignMachineIP(ctx context.Context, actor Actor, req AssignRequest) (Address, error) {
	res, err := s.AssignMachineAddress(ctx, actor, req)
	return res.Address, err
}

// AssignMachineAddress gives one of a machine's interfaces a sticky address,
// in one transaction, with an event on the machine. Asking again for a given
// address is answered with it; asking again for "an address" with
// KeepCurrent is answered with the interface's current sticky address,
// decided in the same transaction as the assignment, so that racing
// requests cannot give one interface two addresses one after the other.
func (s *Store) AssignMachineAddress(ctx context.Context, actor Actor, req AssignRequest) (Assignment, error) {
	mac, err := NormalizeMAC(req.MAC)
	if err != nil {
		return Assignment{}, err
	}
	var res Assignment
	err = s.update(ctx, func(t *Tx) error {
		res = Assignment{}
		m, err := t.machine(req.Machine)
		if err != nil {
			return err
		}
		if err := MayChangeAddresses(actor, m); err != nil {
			return err
		}
		if !slices.Contains(m.MACs, mac) {
			return errorf(CodeInvalid, "machine %s has no interface %s", m.Hostname, mac)
		}
		if cur, ok, err := t.currentSticky(m, mac, req); err != nil || ok {
			res = Assignment{Address: cur, Existing: ok}
			return err
		}
		if !req.IP.IsValid() {
			req.IP = req.Candidate
		}
		res.Address, err = t.assign(s.ipam, actor, m, mac, req)
		return err
	})
	return res, err
}

// currentSticky is the rule of asking again: a request for "an address"
// (no IP, no alias) that keeps the current one, of an interface that has
// its sticky address (in the request's subnet, when it names one), is
// answered with that address.
func (t *Tx) currentSticky(m Machine, mac string, req AssignRequest) (Address, bool, error) {
	if !req.KeepCurrent || req.IP.IsValid() || req.Alias {
		return Address{}, false, nil
	}
	recs, err := t.addressesOfMAC(mac)
	if err != nil {
		return Address{}, false, err
	}
	for _, a := range recs {
		if a.Kind == KindSticky && a.MachineID == m.ID && (!req.Subnet.IsValid() || a.Subnet == req.Subnet.Masked()) {
			return a, true, nil
		}
	}
	return Address{}, false, nil
}

// StickyCandidate returns the address a machine's interface would get if it
// were given a new sticky address now without asking for one, so that it
// can be ARP-probed before AssignMachineIP takes it.
func (s *Store) StickyCandidate(machine, mac string, subnet netip.Prefix) (netip.Addr, error) {
	ip, _, err := s.AssignCandidate(AssignRequest{Machine: machine, MAC: mac, Subnet: subnet})
	return ip, err
}

// AssignCandidate returns the address AssignMachineAddress would take for
// req (which asks for no particular address), so that it can be ARP-probed
// and passed back as req.Candidate; need is false when req would be
// answered with the interface's current address (see currentSticky) and
// there is nothing to probe. The assignment decides again in its own
// transaction.
func (s *Store) AssignCandidate(req AssignRequest) (ip netip.Addr, need bool, err error) {
	mac, err := NormalizeMAC(req.MAC)
	if err != nil {
		return netip.Addr{}, false, err
	}
	err = s.view(func(t *Tx) error {
		m, err := t.machine(req.Machine)
		if err != nil {
			return err
		}
		if _, has, err := t.currentSticky(m, mac, req); err != nil || has {
			return err
		}
		sn, err := t.assignSubnet(m, mac, req.Subnet, netip.Addr{})
		if err != nil {
			return err
		}
		need = true
		ip, err = t.nextStatic(s.ipam, sn)
		return err
	})
	return ip, need && err == nil, err
}

// assignSubnet decides which subnet an interface's new address comes from.
func (t *Tx) assignSubnet(m Machine, mac string, want netip.Prefix, ip netip.Addr) (Subnet, error) {
	subnets, err := t.subnets()
	if err != nil {
		return Subnet{}, err
	}
	if ip.IsValid() {
		for _, sn := range subnets {
			if sn.CIDR.Contains(ip) {
				return sn, nil
			}
		}
		return Subnet{}, errorf(CodeInvalid, "no managed subnet contains %s", ip)
	}
	if want.IsValid() {
		for _, sn := range subnets {
			if sn.CIDR == want.Masked() {
				return sn, nil
			}
		}
		return Subnet{}, errorf(CodeNotFound, "subnet %s is not managed", want)
	}
	recs, err := t.addressesOfMAC(mac)
	if err != nil {
		return Subnet{}, err
	}
	for _, r := range recs {
		if r.Kind == KindDynamic {
			for _, sn := range subnets {
				if sn.CIDR == r.Subnet {
					return sn, nil // where it boots
				}
			}
		}
	}
	if len(subnets) == 1 {
		return subnets[0], nil
	}
	if len(subnets) == 0 {
		return Subnet{}, errorf(CodeNoSubnet, "no subnet is managed yet: add one first")
	}
	return Subnet{}, errorf(CodeInvalid, "machine %s interface %s has no lease to tell its subnet: give the subnet", m.Hostname, mac)
}

func (t *Tx) assign(st *ipamState, actor Actor, m Machine, mac string, req AssignRequest) (Address, error) {
	ip := req.IP.Unmap()
	sn, err := t.assignSubnet(m, mac, req.Subnet, ip)
	if err != nil {
		return Address{}, err
	}
	recs, err := t.addressesOfMAC(mac)
	if err != nil {
		return Address{}, err
	}
	if ip.IsValid() {
		cur, found, err := t.address(ip)
		if err != nil {
			return Address{}, err
		}
		if found && cur.Kind == KindSticky && cur.MachineID == m.ID && cur.MAC == mac {
			return cur, nil // already so
		}
		ownLease := found && cur.Kind == KindDynamic && cur.MAC == mac
		if found && cur.live(t.now) && !ownLease {
			return Address{}, errorf(CodeIPInUse, "%s is in use (%s%s)", ip, cur.Kind, holder(cur))
		}
		if to := st.offeredTo(ip, t.now); to != "" && to != mac {
			return Address{}, errorf(CodeIPInUse, "%s is being offered to %s by DHCP", ip, to)
		}
		if sn.inDynamic(ip) {
			return Address{}, errorf(CodeInvalid, "%s lies in a dynamic range of %s: a machine's own address must not", ip, sn.CIDR)
		}
		if !sn.usable(ip) {
			return Address{}, errorf(CodeInvalid, "%s is the network, broadcast, gateway or DNS address of %s", ip, sn.CIDR)
		}
	} else if ip, err = t.nextStatic(st, sn); err != nil {
		return Address{}, err
	}
	reason := req.Reason
	if !req.Alias {
		for _, old := range recs {
			if old.Kind == KindSticky && old.Subnet == sn.CIDR && old.IP != ip {
				if err := t.deleteAddress(old); err != nil {
					return Address{}, err
				}
				reason = strings.TrimSpace(fmt.Sprintf("%s replaces %s, which returns to the pool; %s", ip, old.IP, reason))
				reason = strings.TrimSuffix(reason, ";")
			}
		}
	}
	// The interface's dynamic lease in this subnet ends here, on this
	// address or another: DHCP answers the interface with its sticky
	// address from now on, so a lease left behind would be listed beside
	// it and kept out of the pool for nothing.
	for _, old := range recs {
		if old.Kind == KindDynamic && old.Subnet == sn.CIDR {
			if err := t.deleteAddress(old); err != nil {
				return Address{}, err
			}
		}
	}
	a := Address{IP: ip, Subnet: sn.CIDR, Kind: KindSticky, MAC: mac, MachineID: m.ID, Created: t.now}
	if err := t.putAddress(a); err != nil {
		return Address{}, err
	}
	action := "ip-assign"
	if req.Alias {
		action = "ip-alias"
	}
	if reason == "" {
		reason = fmt.Sprintf("%s on %s", ip, mac)
	} else {
		reason = fmt.Sprintf("%s on %s: %s", ip, mac, reason)
	}
	return a, t.addEvent(Event{Machine: m.ID, Actor: actor.Name, Action: action, Reason: reason})
}

// RemoveMachineIP takes a sticky address from a machine; it returns to the
// pool and the machine's history says so.
func (s *Store) RemoveMachineIP(ctx context.Context, actor Actor, machine string, ip netip.Addr) (Address, error) {
	var a Address
	err := s.update(ctx, func(t *Tx) error {
		m, err := t.machine(machine)
		if err != nil {
			return err
		}
		if err := MayChangeAddresses(actor, m); err != nil {
			return err
		}
		cur, found, err := t.address(ip.Unmap())
		if err != nil {
			return err
		}
		if !found || cur.Kind != KindSticky || cur.MachineID != m.ID {
			return errorf(CodeNotFound, "%s is not an address of machine %s", ip, m.Hostname)
		}
		a = cur
		if err := t.deleteAddress(cur); err != nil {
			return err
		}
		return t.addEvent(Event{Machine: m.ID, Actor: actor.Name, Action: "ip-remove",
			Reason: fmt.Sprintf("%s on %s returns to the pool", cur.IP, cur.MAC)})
	})
	return a, err
}

// MachineAddresses returns every live address bound to one of the
// machine's interfaces (sticky, and dynamic leases).
func (s *Store) MachineAddresses(m Machine) ([]Address, error) {
	var out []Address
	err := s.view(func(t *Tx) error {
		for _, mac := range m.MACs {
			recs, err := t.addressesOfMAC(mac)
			if err != nil {
				return err
			}
			for _, a := range recs {
				if a.live(t.now) {
					out = append(out, a)
				}
			}
		}
		return nil
	})
	return out, err
}

// NeedsSticky reports whether m should get a sticky address now: the setting
// is on, its hardware is known and its boot interface (first MAC) has none.
func (s *Store) NeedsSticky(m Machine) (bool, error) {
	if !*s.ipam.opts.StickyOnCommission || !m.Commissioned || len(m.MACs) == 0 {
		return false, nil
	}
	recs := []Address{}
	err := s.view(func(t *Tx) error {
		var err error
		recs, err = t.addressesOfMAC(m.MACs[0])
		return err
	})
	for _, a := range recs {
		if a.Kind == KindSticky {
			return false, err
		}
	}
	return true, err
}

// MayChangeAddresses is who may assign and remove a machine's addresses:
// an admin or the machine's owner (CodeForbidden otherwise).
func MayChangeAddresses(actor Actor, m Machine) error {
	if actor.Admin || m.Owner == actor.Name {
		return nil
	}
	return errorf(CodeForbidden, "only an admin or the machine's owner may change its addresses")
}
