package agent

import (
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"rackd/api"
	"rackd/enlist"
	"rackd/netboot/files"
	"rackd/nocloud"
	"rackd/store"
)

// The seed: GET /metadata/v1/seed, the deploy environment's download of
// its machine's cloud-init NoCloud seed (a CIDATA filesystem image), which
// it writes to the disk beside the image. Authenticated by the deploy
// phase credential; the store finds the deployment by it (store.Seed).

// defaultDomain completes the FQDN of a machine whose sticky subnet names
// no domain: cloud-init needs a fully qualified local-hostname, and
// ".internal" is reserved for private names (it never resolves publicly).
const defaultDomain = "internal"

func (a *Agent) serveSeed(w http.ResponseWriter, r *http.Request, _ store.Actor) {
	if !a.limitMetadata(w, r, "seed") {
		return
	}
	outcome := "error"
	defer func() { a.osm.seeds.WithLabelValues(outcome).Inc() }()
	token, ok := bearerToken(r.Header.Get("Authorization"))
	if !ok {
		outcome = "unauthorized"
		writeError(w, http.StatusUnauthorized, api.CodeUnauthorized,
			"missing credential: send Authorization: Bearer <the deploy environment's phase credential>")
		return
	}
	src, err := a.store.Seed(r.Context(), token)
	switch store.CodeOf(err) {
	case "":
	case store.CodeUnauthorized:
		outcome = "unauthorized"
		a.log.Warn("seed refused", "source", r.RemoteAddr, "err", err)
		writeError(w, http.StatusUnauthorized, api.CodeUnauthorized, err.Error())
		return
	case store.CodeConflict:
		outcome = "conflict"
		writeError(w, http.StatusConflict, api.CodeConflict, err.Error())
		return
	default:
		a.storeError(w, r, err)
		return
	}
	m := src.Machine
	seed, err := nocloud.Render(seedIdentity(src, requestBase(a, r)))
	var img []byte
	if err == nil {
		img, err = seed.Image()
	}
	if err != nil {
		// What rackd knows about the machine cannot make a seed (a
		// gateway outside its subnet, a hostname no FQDN can be made
		// of): the environment fails the deployment with this reason
		// rather than retry.
		a.log.Error("seed not rendered", "machine", m.ID, "hostname", m.Hostname, "err", err)
		writeError(w, http.StatusConflict, api.CodeConflict, "machine "+m.Hostname+": its seed cannot be made: "+err.Error())
		return
	}
	outcome = "served"
	a.log.Info("seed served", "machine", m.ID, "hostname", m.Hostname, "instance_id", src.Deployment.InstanceID,
		"bytes", len(img), "interfaces", len(seed.NetworkConfig) > 0, "source", r.RemoteAddr)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(img)))
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	w.Write(img)
}

// requestBase is rackd's base URL as the caller reached it, the rackd.url
// its boot config gave it: the Host it asked for, else what bootBase
// derives from the address the request arrived at (as for boot configs).
func requestBase(a *Agent, r *http.Request) string {
	if r.Host != "" {
		return "http://" + r.Host
	}
	ctx := r.Context()
	if la, ok := ctx.Value(http.LocalAddrContextKey).(net.Addr); ok {
		if ap, err := netip.ParseAddrPort(la.String()); err == nil {
			ctx = files.WithLocalAddr(ctx, ap.Addr())
		}
	}
	if a.bootBase == nil {
		return ""
	}
	return a.bootBase.forRequest(ctx)
}

// seedIdentity is the deployed OS's identity: the deployment's instance
// and keys and user-data, the machine's FQDN in the domain of its first
// sticky subnet, and a static configuration of each interface that has
// sticky addresses (the others are left alone: a NIC without a cable must
// not hold the boot up waiting for DHCP). The default route of each
// address family goes on the first interface whose subnet has a gateway of
// that family; DNS servers and the search domain come from the subnets.
func seedIdentity(src store.SeedSource, base string) nocloud.Identity {
	d := src.Deployment
	id := nocloud.Identity{InstanceID: d.InstanceID, SSHKeys: d.SSHKeys, UserData: src.UserData,
		PhoneHomeURL: base + enlist.PathOSPrefix + src.OSToken + "/phone-home",
		EventsURL:    base + enlist.PathOSPrefix + src.OSToken + "/events"}
	domain := ""
	for _, sa := range src.Addresses {
		if sa.Subnet.Domain != "" {
			domain = sa.Subnet.Domain
			break
		}
	}
	id.Hostname = fqdn(src.Machine.Hostname, domain)
	gatewayTaken := map[bool]bool{} // by "is IPv4"
	byMAC := map[string]int{}
	for _, sa := range src.Addresses {
		i, ok := byMAC[sa.MAC]
		if !ok {
			i = len(id.Interfaces)
			byMAC[sa.MAC] = i
			id.Interfaces = append(id.Interfaces, nocloud.Interface{MAC: sa.MAC})
		}
		ifc := &id.Interfaces[i]
		ifc.Addresses = append(ifc.Addresses, netip.PrefixFrom(sa.IP, sa.Subnet.CIDR.Bits()))
		if gw := sa.Subnet.Gateway; gw.IsValid() && !ifc.Gateway.IsValid() && !gatewayTaken[gw.Is4()] {
			ifc.Gateway = gw
			gatewayTaken[gw.Is4()] = true
		}
		for _, dns := range sa.Subnet.DNSServers {
			if !slices.Contains(ifc.DNS, dns) {
				ifc.DNS = append(ifc.DNS, dns)
			}
		}
		if dom := sa.Subnet.Domain; dom != "" && !slices.Contains(ifc.Search, dom) {
			ifc.Search = append(ifc.Search, dom)
		}
	}
	return id
}

// fqdn is a machine's fully qualified name: its hostname when it is
// qualified already, else the hostname in domain (defaultDomain when
// empty).
func fqdn(hostname, domain string) string {
	if strings.Contains(hostname, ".") {
		return hostname
	}
	if domain == "" {
		domain = defaultDomain
	}
	return hostname + "." + strings.TrimSuffix(domain, ".")
}
