package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"strings"

	"rackd/agent/client"
	"rackd/api"
)

// This file holds the address management verbs: subnets, ips, leases and the
// machines set-ip / unset-ip pair.

func subnetsGroup() *group {
	g := &group{name: "subnets", summary: "Manage the subnets rackd hands out addresses in."}
	g.verbs = []*verb{subnetsAddVerb(), subnetsListVerb()}
	for _, v := range g.verbs {
		v.group = g.name
	}
	return g
}

func ipsGroup() *group {
	g := &group{name: "ips", summary: "Reserve addresses and list the addresses in use."}
	g.verbs = []*verb{ipsReserveVerb(), ipsReleaseVerb(), ipsListVerb()}
	for _, v := range g.verbs {
		v.group = g.name
	}
	return g
}

// rangeList is a repeatable START-END flag: --dynamic 10.0.0.100-10.0.0.199.
type rangeList []api.Range

func (r *rangeList) String() string {
	parts := make([]string, len(*r))
	for i, x := range *r {
		parts[i] = x.Start + "-" + x.End
	}
	return strings.Join(parts, ",")
}

// Set parses one range. Addresses never hold a '-' (IPv6 uses ':'), so the
// split is unambiguous; both ends must be addresses, so that a CIDR or a
// single address given by mistake is a usage error rather than a range the
// server has to make sense of.
func (r *rangeList) Set(v string) error {
	start, end, ok := strings.Cut(v, "-")
	start, end = strings.TrimSpace(start), strings.TrimSpace(end)
	if !ok || start == "" || end == "" || strings.Contains(end, "-") {
		return errors.New("want START-END, e.g. 10.0.0.100-10.0.0.199")
	}
	for _, a := range []string{start, end} {
		if _, err := netip.ParseAddr(a); err != nil {
			return fmt.Errorf("%q is not an IP address (want START-END, e.g. 10.0.0.100-10.0.0.199)", a)
		}
	}
	*r = append(*r, api.Range{Start: start, End: end})
	return nil
}

func subnetsAddVerb() *verb {
	return &verb{
		name:     "add",
		args:     []string{"CIDR"},
		synopsis: "[--gateway IP] [--dns IP ...] [--domain D] [--lease-seconds N] [--dynamic START-END ...] [--reserved START-END ...]",
		summary:  "add a managed subnet (admin)",
		help: `CIDR is the network, e.g. 10.0.0.0/24 or 2001:db8::/64. DHCP hands out
leases from the dynamic ranges only; machines' sticky addresses and
reservations without an address come from the rest of the subnet, outside
the dynamic and reserved ranges. Reserved ranges are never handed out (other
equipment, addresses managed elsewhere). Ranges are inclusive and must lie in
the subnet without overlapping; the gateway must not be in a dynamic range.`,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			var sn api.Subnet
			var dns stringList
			var dynamic, reserved rangeList
			fs.StringVar(&sn.Gateway, "gateway", "", "default gateway `IP` given to DHCP clients")
			fs.Var(&dns, "dns", "DNS server `IP` given to DHCP clients (repeatable)")
			fs.StringVar(&sn.Domain, "domain", "", "DNS `DOMAIN` of the subnet")
			fs.IntVar(&sn.LeaseSeconds, "lease-seconds", 0, "DHCP lease time in seconds, `N` (default: the server's, 3600)")
			fs.Var(&dynamic, "dynamic", "dynamic (DHCP) range `START-END` (repeatable)")
			fs.Var(&reserved, "reserved", "range `START-END` never handed out (repeatable)")
			return func(e *env, args []string) error {
				if sn.LeaseSeconds < 0 {
					return usagef("--lease-seconds must not be negative")
				}
				sn.CIDR = args[0]
				sn.DNSServers, sn.DynamicRanges, sn.ReservedRanges = dns, dynamic, reserved
				return callAndPrint(e, func(ctx context.Context, c *client.Client) (api.Subnet, error) {
					return c.CreateSubnet(ctx, sn)
				}, func(w io.Writer, sn api.Subnet) error { return printSubnets(w, []api.Subnet{sn}) })
			}
		},
	}
}

func subnetsListVerb() *verb {
	return &verb{
		name:    "list",
		summary: "list subnets and how full their dynamic ranges are",
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			return func(e *env, _ []string) error {
				return callAndPrint(e, func(ctx context.Context, c *client.Client) ([]api.Subnet, error) {
					return c.ListSubnets(ctx)
				}, func(w io.Writer, sns []api.Subnet) error { return printSubnets(w, sns) })
			}
		},
	}
}

func ipsReserveVerb() *verb {
	return &verb{
		name:      "reserve",
		optArgs:   []string{"IP"},
		argsUsage: "(IP | --subnet CIDR)",
		synopsis:  "[--mac M] [--hostname H] [--purpose P]",
		summary:   "reserve an address, or the first free one of a subnet",
		help: `Give either the address or --subnet; with --subnet, rackd picks the first
free address outside the subnet's dynamic and reserved ranges. With --mac,
DHCP answers that device with exactly this address; with --hostname, DNS
names it. The reservation belongs to you: you or an admin can release it.`,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			var req api.ReserveRequest
			fs.StringVar(&req.Subnet, "subnet", "", "reserve the first free address of `CIDR`")
			fs.StringVar(&req.MAC, "mac", "", "`MAC` of the device DHCP should give the address to")
			fs.StringVar(&req.Hostname, "hostname", "", "`NAME` for the address in DNS")
			fs.StringVar(&req.Purpose, "purpose", "", "free-text `PURPOSE`, shown in rackd ips list")
			return func(e *env, args []string) error {
				if len(args) > 0 {
					req.IP = args[0]
				}
				switch {
				case req.IP == "" && req.Subnet == "":
					return usagef("give the IP to reserve, or --subnet CIDR for the first free one")
				case req.IP != "" && req.Subnet != "":
					return usagef("give the IP or --subnet, not both")
				}
				return callAndPrint(e, func(ctx context.Context, c *client.Client) (api.Address, error) {
					return c.Reserve(ctx, req)
				}, func(w io.Writer, a api.Address) error { return printAddresses(w, []api.Address{a}) })
			}
		},
	}
}

func ipsReleaseVerb() *verb {
	return &verb{
		name:    "release",
		args:    []string{"IP"},
		summary: "release a reservation (its owner or an admin)",
		help:    "Same as DELETE /api/v1/ips/reservations/IP. Prints the reservation as it was.",
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			return func(e *env, args []string) error {
				return callAndPrint(e, func(ctx context.Context, c *client.Client) (api.Address, error) {
					return c.Unreserve(ctx, args[0])
				}, func(w io.Writer, a api.Address) error { return printAddresses(w, []api.Address{a}) })
			}
		},
	}
}

func ipsListVerb() *verb {
	return &verb{
		name:     "list",
		synopsis: "[--kind K]",
		summary:  "list the addresses in use",
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			var kind string
			fs.StringVar(&kind, "kind", "", "only addresses of `KIND`: dynamic, sticky, reserved or discovered")
			return func(e *env, _ []string) error {
				kind = strings.ToLower(kind)
				return callAndPrint(e, func(ctx context.Context, c *client.Client) ([]api.Address, error) {
					return c.ListAddresses(ctx, kind)
				}, func(w io.Writer, as []api.Address) error { return printAddresses(w, as) })
			}
		},
	}
}

func leasesVerb() *verb {
	return &verb{
		name:    "leases",
		summary: "list the live DHCP leases",
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			return func(e *env, _ []string) error {
				return callAndPrint(e, func(ctx context.Context, c *client.Client) ([]api.Lease, error) {
					return c.ListLeases(ctx)
				}, func(w io.Writer, ls []api.Lease) error { return printLeases(w, ls) })
			}
		},
	}
}

func machinesSetIPVerb() *verb {
	return &verb{
		name:     "set-ip",
		args:     []string{"ID"},
		synopsis: "--mac M [--ip IP] [--subnet CIDR] [--alias] [--reason R]",
		summary:  "give a machine's interface an address, or an alias",
		help: `ID is the machine's id or hostname, --mac one of its interfaces. Without
--ip, rackd picks the next free static address (of --subnet, else of the
interface's subnet) after checking that nothing answers for it. Without
--alias the address replaces the interface's sticky address in that subnet,
which returns to the pool; with --alias it is added next to the others. The
change and the reason are kept in the machine's events.`,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			var req api.AssignIP
			fs.StringVar(&req.MAC, "mac", "", "`MAC` of the machine's interface (required)")
			fs.StringVar(&req.IP, "ip", "", "the `IP` to give it (default: the next free one)")
			fs.StringVar(&req.Subnet, "subnet", "", "pick the address in `CIDR`")
			fs.BoolVar(&req.Alias, "alias", false, "add the address next to the interface's others instead of replacing its address")
			fs.StringVar(&req.Reason, "reason", "", "why, for the machine's events")
			return func(e *env, args []string) error {
				if req.MAC == "" {
					return usagef("--mac is required")
				}
				return callAndPrint(e, func(ctx context.Context, c *client.Client) (api.Address, error) {
					return c.AssignIP(ctx, args[0], req)
				}, func(w io.Writer, a api.Address) error { return printAddresses(w, []api.Address{a}) })
			}
		},
	}
}

func machinesUnsetIPVerb() *verb {
	return &verb{
		name:    "unset-ip",
		args:    []string{"ID", "IP"},
		summary: "take an address away from a machine (it returns to the pool)",
		help:    "ID is the machine's id or hostname. The change is kept in the machine's events.",
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			return func(e *env, args []string) error {
				return callAndPrint(e, func(ctx context.Context, c *client.Client) (api.Address, error) {
					return c.RemoveIP(ctx, args[0], args[1])
				}, func(w io.Writer, a api.Address) error { return printAddresses(w, []api.Address{a}) })
			}
		},
	}
}
