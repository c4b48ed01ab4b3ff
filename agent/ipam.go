package agent

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"rackd/api"
	"rackd/store"
)

// This file is the HTTP face of address management: subnets, reservations,
// machine addresses and leases. The rules live in store/.

func parseAddr(field, s string) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, nil
	}
	ip, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil || ip.Zone() != "" {
		return netip.Addr{}, &store.Error{Code: store.CodeInvalid, Msg: fmt.Sprintf("%s %q is not an IP address", field, s)}
	}
	return ip.Unmap(), nil
}

func parsePrefix(field, s string) (netip.Prefix, error) {
	if s == "" {
		return netip.Prefix{}, nil
	}
	p, err := netip.ParsePrefix(strings.TrimSpace(s))
	if err != nil {
		return netip.Prefix{}, &store.Error{Code: store.CodeInvalid, Msg: fmt.Sprintf("%s %q is not a CIDR like 10.0.0.0/24", field, s)}
	}
	return p, nil
}

func subnetFromAPI(in api.Subnet) (store.Subnet, error) {
	var sn store.Subnet
	var err error
	if sn.CIDR, err = parsePrefix("cidr", in.CIDR); err != nil {
		return sn, err
	}
	if sn.Gateway, err = parseAddr("gateway", in.Gateway); err != nil {
		return sn, err
	}
	for _, d := range in.DNSServers {
		ip, err := parseAddr("dns server", d)
		if err != nil {
			return sn, err
		}
		sn.DNSServers = append(sn.DNSServers, ip)
	}
	ranges := func(field string, in []api.Range) ([]store.Range, error) {
		var out []store.Range
		for _, r := range in {
			start, err := parseAddr(field+" start", r.Start)
			if err != nil {
				return nil, err
			}
			end, err := parseAddr(field+" end", r.End)
			if err != nil {
				return nil, err
			}
			out = append(out, store.Range{Start: start, End: end})
		}
		return out, nil
	}
	if sn.DynamicRanges, err = ranges("dynamic range", in.DynamicRanges); err != nil {
		return sn, err
	}
	if sn.ReservedRanges, err = ranges("reserved range", in.ReservedRanges); err != nil {
		return sn, err
	}
	sn.Domain, sn.LeaseSeconds = in.Domain, in.LeaseSeconds
	return sn, nil
}

func subnetView(sn store.Subnet, usage [2]uint64) api.Subnet {
	out := api.Subnet{CIDR: sn.CIDR.String(), Domain: sn.Domain, LeaseSeconds: sn.LeaseSeconds,
		Created: sn.Created, DynamicSize: usage[0], DynamicUsed: usage[1]}
	if sn.Gateway.IsValid() {
		out.Gateway = sn.Gateway.String()
	}
	for _, d := range sn.DNSServers {
		out.DNSServers = append(out.DNSServers, d.String())
	}
	for _, r := range sn.DynamicRanges {
		out.DynamicRanges = append(out.DynamicRanges, api.Range{Start: r.Start.String(), End: r.End.String()})
	}
	for _, r := range sn.ReservedRanges {
		out.ReservedRanges = append(out.ReservedRanges, api.Range{Start: r.Start.String(), End: r.End.String()})
	}
	return out
}

func addressView(a store.Address) api.Address {
	return api.Address{IP: a.IP.String(), Subnet: a.Subnet.String(), Kind: string(a.Kind), MAC: a.MAC,
		Machine: a.MachineID, Hostname: a.Hostname, Owner: a.Owner, Purpose: a.Purpose,
		Expires: a.Expires, Created: a.Created}
}

func (a *Agent) createSubnet(w http.ResponseWriter, r *http.Request, who store.Actor) {
	var req api.Subnet
	if a.decodeBody(w, r, &req, false) != nil {
		return
	}
	sn, err := subnetFromAPI(req)
	if err == nil {
		sn, err = a.store.CreateSubnet(r.Context(), who, sn)
	}
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	a.log.Info("subnet created", "cidr", sn.CIDR, "by", who.Name)
	usage, err := a.store.PoolUsage()
	if err != nil {
		a.log.Warn("read pool usage", "err", err)
	}
	writeJSON(w, http.StatusCreated, subnetView(sn, usage[sn.CIDR]))
}

func (a *Agent) listSubnets(w http.ResponseWriter, r *http.Request, _ store.Actor) {
	subnets, err := a.store.Subnets()
	if err != nil {
		a.internalError(w, r, err)
		return
	}
	usage, err := a.store.PoolUsage()
	if err != nil {
		a.internalError(w, r, err)
		return
	}
	out := make([]api.Subnet, len(subnets))
	for i, sn := range subnets {
		out[i] = subnetView(sn, usage[sn.CIDR])
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *Agent) reserve(w http.ResponseWriter, r *http.Request, who store.Actor) {
	var req api.ReserveRequest
	if a.decodeBody(w, r, &req, false) != nil {
		return
	}
	var sreq store.ReserveRequest
	var err error
	if sreq.IP, err = parseAddr("ip", req.IP); err == nil {
		sreq.Subnet, err = parsePrefix("subnet", req.Subnet)
	}
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	sreq.MAC, sreq.Hostname, sreq.Purpose = req.MAC, req.Hostname, req.Purpose
	addr, err := a.store.Reserve(r.Context(), who, sreq)
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	a.log.Info("address reserved", "ip", addr.IP, "mac", addr.MAC, "hostname", addr.Hostname, "by", who.Name)
	writeJSON(w, http.StatusCreated, addressView(addr))
}

func (a *Agent) unreserve(w http.ResponseWriter, r *http.Request, who store.Actor) {
	ip, err := parseAddr("ip", r.PathValue("ip"))
	if err == nil && !ip.IsValid() {
		err = &store.Error{Code: store.CodeInvalid, Msg: "which address?"}
	}
	var addr store.Address
	if err == nil {
		addr, err = a.store.Unreserve(r.Context(), who, ip)
	}
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	a.log.Info("reservation released", "ip", addr.IP, "by", who.Name)
	writeJSON(w, http.StatusOK, addressView(addr))
}

func (a *Agent) listAddresses(w http.ResponseWriter, r *http.Request, _ store.Actor) {
	kind := store.AddrKind(r.URL.Query().Get("kind"))
	switch kind {
	case "", store.KindDynamic, store.KindSticky, store.KindReserved, store.KindDiscovered:
	default:
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, fmt.Sprintf("unknown kind %q: want dynamic, sticky, reserved or discovered", kind))
		return
	}
	addrs, err := a.store.Addresses(func(x store.Address) bool { return kind == "" || x.Kind == kind })
	if err != nil {
		a.internalError(w, r, err)
		return
	}
	out := make([]api.Address, len(addrs))
	for i, x := range addrs {
		out[i] = addressView(x)
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *Agent) listLeases(w http.ResponseWriter, r *http.Request, _ store.Actor) {
	leases, err := a.store.Leases()
	if err != nil {
		a.internalError(w, r, err)
		return
	}
	out := make([]api.Lease, len(leases))
	for i, l := range leases {
		out[i] = api.Lease{IP: l.IP.String(), MAC: l.MAC, Hostname: l.Hostname, Expires: l.Expires, Subnet: l.Subnet.String()}
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *Agent) assignIP(w http.ResponseWriter, r *http.Request, who store.Actor) {
	var req api.AssignIP
	if a.decodeBody(w, r, &req, false) != nil {
		return
	}
	sreq := store.AssignRequest{Machine: r.PathValue("id"), MAC: req.MAC, Alias: req.Alias, Reason: req.Reason}
	var err error
	if sreq.IP, err = parseAddr("ip", req.IP); err == nil {
		sreq.Subnet, err = parsePrefix("subnet", req.Subnet)
	}
	// Asking again for "an address" is answered with the one it has (the
	// store decides, in the assignment's transaction).
	sreq.KeepCurrent = !sreq.IP.IsValid() && !sreq.Alias
	if err == nil && !sreq.IP.IsValid() {
		// No address asked for: probe the candidate first, as DHCP does.
		sreq.Candidate, err = a.probedCandidate(r.Context(), sreq)
	}
	var res store.Assignment
	if err == nil {
		res, err = a.store.AssignMachineAddress(r.Context(), who, sreq)
	}
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	addr := res.Address
	if res.Existing {
		writeJSON(w, http.StatusOK, addressView(addr))
		return
	}
	a.log.Info("machine address assigned", "machine", sreq.Machine, "ip", addr.IP, "mac", addr.MAC, "alias", req.Alias, "by", who.Name)
	writeJSON(w, http.StatusCreated, addressView(addr))
}

func (a *Agent) removeIP(w http.ResponseWriter, r *http.Request, who store.Actor) {
	ip, err := parseAddr("ip", r.PathValue("ip"))
	var addr store.Address
	if err == nil {
		addr, err = a.store.RemoveMachineIP(r.Context(), who, r.PathValue("id"), ip)
	}
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, addressView(addr))
}

// Prober finds out whether an address is in use on a link rackd is on. The
// DHCP server's ARP prober implements it; nil means nothing is probed.
type Prober interface {
	// InUse reports the MAC that answers for ip, or ok=false when nobody
	// does (or ip is not on a link this prober can reach).
	InUse(ctx context.Context, ip netip.Addr) (mac string, ok bool, err error)
}

// probedCandidate picks the static address the store would give req (which
// asks for no particular address) and makes sure nobody answers for it;
// addresses that answer are quarantined and the next one is tried. It
// returns no address when there is nothing to probe (no prober: the store
// picks in the assignment's transaction; or req keeps the interface's
// current address).
func (a *Agent) probedCandidate(ctx context.Context, req store.AssignRequest) (netip.Addr, error) {
	if a.prober == nil {
		return netip.Addr{}, nil
	}
	for range 8 {
		ip, need, err := a.store.AssignCandidate(req)
		if err != nil || !need {
			return netip.Addr{}, err
		}
		by, inUse, err := a.prober.InUse(ctx, ip)
		if err != nil {
			a.log.Warn("probe failed; assigning without it", "ip", ip, "err", err)
			return ip, nil
		}
		if !inUse {
			return ip, nil
		}
		a.metrics.probeConflicts.Inc()
		a.log.Warn("address in use by an unknown host: quarantined", "ip", ip, "by", by)
		if err := a.store.Quarantine(ctx, ip, by, "answered an ARP probe before a sticky assignment"); err != nil {
			return netip.Addr{}, err
		}
	}
	return netip.Addr{}, &store.Error{Code: store.CodeExhausted, Msg: "every candidate address answered an ARP probe"}
}

// ensureSticky gives a machine whose hardware is known its sticky address
// when ipam.sticky_on_commission says so. Failing to is not an error
// of the request that triggered it: the machine is logged and keeps going.
func (a *Agent) ensureSticky(ctx context.Context, m store.Machine) {
	need, err := a.store.NeedsSticky(m)
	if err != nil || !need {
		return
	}
	req := store.AssignRequest{Machine: m.ID, MAC: m.MACs[0], KeepCurrent: true, Reason: "sticky address of the boot interface"}
	req.Candidate, err = a.probedCandidate(ctx, req)
	var res store.Assignment
	if err == nil {
		res, err = a.store.AssignMachineAddress(ctx, store.System, req)
	}
	ip := res.Address.IP
	switch {
	case err == nil && res.Existing:
		a.log.Debug("the boot interface has its sticky address already", "machine", m.ID, "ip", ip)
	case err == nil:
		a.log.Info("sticky address assigned", "machine", m.ID, "hostname", m.Hostname, "ip", ip)
	case store.CodeOf(err) == store.CodeNoSubnet:
		a.log.Debug("no subnet for a sticky address yet", "machine", m.ID)
	default:
		a.log.Warn("could not assign a sticky address", "machine", m.ID, "hostname", m.Hostname, "err", err)
	}
}
