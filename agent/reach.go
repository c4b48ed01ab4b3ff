package agent

import (
	"fmt"
	"net"
	"net/netip"
)

// Machines reach rackd over the provisioning network twice while booting:
// TFTP (BIOS and UEFI PXE firmware fetch their loader, pxelinux and GRUB
// their configs) and HTTP (iPXE, UEFI HTTP boot and GRUB's kernels; the
// enlistment, commissioning and deploy environments at rackd.url). Only
// operators need the API, which shares HTTP's listener. A configuration
// that answers DHCP while either of those is out of the machines' reach
// hands out boot offers that cannot succeed; it is legal (DHCP for other
// hosts, a proxy in front of HTTP), so rackd warns rather than refuses.

// bootReachWarnings says, one sentence each with the fix, what in cfg keeps
// machines that rackd's DHCP answers from booting, when HTTP listens on
// httpAddr. Nothing when DHCP is off.
func bootReachWarnings(cfg Config, httpAddr net.Addr) []string {
	addrs, _, _ := cfg.dhcpAddrs()
	if len(cfg.DHCP.Interfaces) == 0 && len(addrs) == 0 {
		return nil
	}
	var out []string
	if cfg.DHCP.HTTPURL == "" && loopbackOnly(httpAddr.String()) {
		_, port, _ := net.SplitHostPort(httpAddr.String())
		out = append(out, fmt.Sprintf("DHCP is on but HTTP (boot files, kernels, /metadata/ for the enlistment environment) listens on loopback only (%s): "+
			"machines cannot fetch their boot configs or report back. Fix: listen = \"0.0.0.0:%s\" (or the provisioning interface's address) in the config, or --listen 0.0.0.0:%s",
			httpAddr, port, port))
	}
	switch {
	case cfg.TFTP.Listen == "":
		out = append(out, "DHCP is on but TFTP is off: BIOS and UEFI PXE firmware fetch their loader over TFTP, so only iPXE and UEFI HTTP boot clients can boot. "+
			"Fix: [tftp] listen = \"0.0.0.0:69\" in the config")
	case loopbackOnly(cfg.TFTP.Listen):
		out = append(out, fmt.Sprintf("DHCP is on but TFTP listens on loopback only (%s): PXE firmware cannot fetch its loader. "+
			"Fix: [tftp] listen = \"0.0.0.0:69\" (or the provisioning interface's address) in the config", cfg.TFTP.Listen))
	}
	return out
}

// loopbackOnly reports whether the host:port hostport listens on a loopback
// address only ("127.0.0.1:5240", "[::1]:5240", "localhost:5240").
func loopbackOnly(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// warnBootReach logs bootReachWarnings at Warn, once at start.
func (a *Agent) warnBootReach(httpAddr net.Addr) {
	for _, w := range bootReachWarnings(a.cfg, httpAddr) {
		a.log.Warn(w)
	}
}
