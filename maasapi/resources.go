package maasapi

import (
	"net/http"
)

// The resources around machines: zones, pools, tags, the network model,
// addresses, DNS, boot resources and files. routes() appends these.

// emptyAnswer is a success with nothing to say (MAAS's 204s).
var emptyAnswer = raw{contentType: "text/plain; charset=utf-8"}

// notServed answers a write on a resource rackd keeps no such notion of:
// a 501 naming the operation and what rackd offers instead.
func notServed(why string) func(*Server, *call) (any, error) {
	return func(s *Server, c *call) (any, error) {
		op := "op=" + c.route.Op
		if c.route.Op == "" {
			op = map[string]string{"GET": "read", "POST": "create", "PUT": "update", "DELETE": "delete"}[c.route.Method]
		}
		return nil, errorf(http.StatusNotImplemented, "rackd does not implement %s %s%s %s: %s", c.route.Method, Prefix, c.route.Path, op, why)
	}
}

const (
	whyZones   = "rackd's zones are labels on machines: set one with PUT machines/{system_id}/ zone=NAME (or PATCH /api/v1/machines/{id})"
	whyPools   = "rackd has no resource pools: every machine is in the pool \"default\""
	whyNetwork = "rackd has one fabric and its untagged VLAN, holding every subnet, and no spaces"
	whyRoutes  = "rackd configures a machine's network from its subnet (address, gateway, DNS) and sets no static routes"
	whySubnets = "rackd's subnets are made with their ranges by POST /api/v1/subnets (rackd subnets create), and are not changed or deleted"
	whyRanges  = "a subnet's dynamic and reserved ranges are set when it is made (POST /api/v1/subnets)"
	whyDomains = "a domain is a subnet's, set when the subnet is made (POST /api/v1/subnets)"
	whyDNS     = "rackd names machines and reservations: reserve a named address with POST ipaddresses/?op=reserve hostname=NAME"
	whyImages  = "images are imported with POST /api/v1/images/import (rackd images import) and deleted with DELETE /api/v1/images/{name}/{arch}"
)

func resourceRoutes() []Route {
	return []Route{
		{Method: "GET", Path: "zones/", Handler: "ZonesHandler", Handle: zonesRead,
			Doc: "The zones: \"default\" and every zone a machine is in."},
		{Method: "POST", Path: "zones/", Handler: "ZonesHandler", Handle: notServed(whyZones),
			Doc: "501: " + whyZones + "."},
		{Method: "GET", Path: "zones/{name}/", Handler: "ZoneHandler", Handle: zoneRead,
			Doc: "One zone, by name."},
		{Method: "PUT", Path: "zones/{name}/", Handler: "ZoneHandler", Handle: notServed(whyZones),
			Doc: "501: " + whyZones + "."},
		{Method: "DELETE", Path: "zones/{name}/", Handler: "ZoneHandler", Handle: notServed(whyZones),
			Doc: "501: " + whyZones + "."},

		{Method: "GET", Path: "resourcepools/", Handler: "ResourcePoolsHandler", Handle: poolsRead,
			Doc: "The one pool, \"default\" (id 0)."},
		{Method: "POST", Path: "resourcepools/", Handler: "ResourcePoolsHandler", Handle: notServed(whyPools),
			Doc: "501: " + whyPools + "."},
		{Method: "GET", Path: "pools/", Handler: "PoolsHandler", Handle: poolsRead,
			Doc: "resourcepools/ again, where gomaasapi's Pools() asks (MAAS itself answers 404 there)."},
		{Method: "GET", Path: "resourcepools/{id}/", Handler: "ResourcePoolHandler", Handle: poolRead,
			Doc: "The pool \"default\", by id (0) or name."},
		{Method: "PUT", Path: "resourcepools/{id}/", Handler: "ResourcePoolHandler", Handle: notServed(whyPools),
			Doc: "501: " + whyPools + "."},
		{Method: "DELETE", Path: "resourcepools/{id}/", Handler: "ResourcePoolHandler", Handle: notServed(whyPools),
			Doc: "501: " + whyPools + "."},

		{Method: "GET", Path: "tags/", Handler: "TagsHandler", Handle: tagsRead,
			Doc: "Every tag: those defined and those machines carry."},
		{Method: "POST", Path: "tags/", Handler: "TagsHandler", Handle: tagsCreate,
			Doc: "Admins: define a tag (name, comment), carried by no machine yet; a definition (XPath) or kernel_opts is a 400."},
		{Method: "GET", Path: "tags/{name}/", Handler: "TagHandler", Handle: tagRead,
			Doc: "One tag (404 when it is neither defined nor carried)."},
		{Method: "GET", Path: "tags/{name}/", Op: "machines", Handler: "TagHandler", Handle: tagMachines,
			Doc: "The machines with the tag that the caller may see, as machines/ shows them."},
		{Method: "POST", Path: "tags/{name}/", Op: "update_nodes", Handler: "TagHandler", Handle: tagUpdateNodes,
			Doc: "Admins: put the tag on the machines of add= and take it off those of remove=, in one transaction."},
		{Method: "PUT", Path: "tags/{name}/", Handler: "TagHandler", Handle: tagUpdate,
			Doc: "Admins: rename the tag (on its machines too) or change its comment; a definition or kernel_opts is a 400."},
		{Method: "DELETE", Path: "tags/{name}/", Handler: "TagHandler", Handle: tagDelete,
			Doc: "Admins: remove the tag, its definition and the tag on every machine, in one transaction."},

		{Method: "GET", Path: "fabrics/", Handler: "FabricsHandler", Handle: fabricsRead,
			Doc: "The one fabric, fabric-0 (id 0), with its untagged VLAN."},
		{Method: "POST", Path: "fabrics/", Handler: "FabricsHandler", Handle: notServed(whyNetwork),
			Doc: "501: " + whyNetwork + "."},
		{Method: "GET", Path: "fabrics/{id}/", Handler: "FabricHandler", Handle: fabricRead,
			Doc: "fabric-0, by id (0) or name."},
		{Method: "PUT", Path: "fabrics/{id}/", Handler: "FabricHandler", Handle: notServed(whyNetwork),
			Doc: "501: " + whyNetwork + "."},
		{Method: "DELETE", Path: "fabrics/{id}/", Handler: "FabricHandler", Handle: notServed(whyNetwork),
			Doc: "501: " + whyNetwork + "."},
		{Method: "GET", Path: "fabrics/{fabric_id}/vlans/", Handler: "VlansHandler", Handle: vlansRead,
			Doc: "fabric-0's VLANs: the untagged one (id 5001, vid 0)."},
		{Method: "POST", Path: "fabrics/{fabric_id}/vlans/", Handler: "VlansHandler", Handle: notServed(whyNetwork),
			Doc: "501: " + whyNetwork + "."},
		{Method: "GET", Path: "fabrics/{fabric_id}/vlans/{vid}/", Handler: "VlanHandler", Handle: vlanRead,
			Doc: "The untagged VLAN, by its fabric and vid (0)."},
		{Method: "PUT", Path: "fabrics/{fabric_id}/vlans/{vid}/", Handler: "VlanHandler", Handle: notServed(whyNetwork),
			Doc: "501: " + whyNetwork + "."},
		{Method: "DELETE", Path: "fabrics/{fabric_id}/vlans/{vid}/", Handler: "VlanHandler", Handle: notServed(whyNetwork),
			Doc: "501: " + whyNetwork + "."},
		{Method: "GET", Path: "vlans/{vlan_id}/", Handler: "VlanHandler", Handle: vlanByIDRead,
			Doc: "The untagged VLAN, by id (5001)."},

		{Method: "GET", Path: "spaces/", Handler: "SpacesHandler", Handle: spacesRead,
			Doc: "MAAS's \"undefined\" space (id -1), with every subnet: rackd has no spaces."},
		{Method: "POST", Path: "spaces/", Handler: "SpacesHandler", Handle: notServed(whyNetwork),
			Doc: "501: " + whyNetwork + "."},
		{Method: "GET", Path: "spaces/{id}/", Handler: "SpaceHandler", Handle: spaceRead,
			Doc: "The \"undefined\" space, by id (-1) or name."},
		{Method: "PUT", Path: "spaces/{id}/", Handler: "SpaceHandler", Handle: notServed(whyNetwork),
			Doc: "501: " + whyNetwork + "."},
		{Method: "DELETE", Path: "spaces/{id}/", Handler: "SpaceHandler", Handle: notServed(whyNetwork),
			Doc: "501: " + whyNetwork + "."},

		{Method: "GET", Path: "static-routes/", Handler: "StaticRoutesHandler", Handle: staticRoutesRead,
			Doc: "None: rackd sets no static routes on machines."},
		{Method: "POST", Path: "static-routes/", Handler: "StaticRoutesHandler", Handle: notServed(whyRoutes),
			Doc: "501: " + whyRoutes + "."},

		{Method: "GET", Path: "subnets/", Handler: "SubnetsHandler", Handle: subnetsRead,
			Doc: "rackd's subnets, by address."},
		{Method: "POST", Path: "subnets/", Handler: "SubnetsHandler", Handle: notServed(whySubnets),
			Doc: "501: " + whySubnets + "."},
		{Method: "GET", Path: "subnets/{id}/", Handler: "SubnetHandler", Handle: subnetRead,
			Doc: "One subnet, by id, CIDR (its name), or id:/cidr:/name: specifier."},
		{Method: "GET", Path: "subnets/{id}/", Op: "ip_addresses", Handler: "SubnetHandler", Handle: subnetIPAddresses,
			Doc: "Every address in use in the subnet, with its user and machine (with_username, with_summary)."},
		{Method: "GET", Path: "subnets/{id}/", Op: "reserved_ip_ranges", Handler: "SubnetHandler", Handle: subnetReservedRanges,
			Doc: "The subnet's addresses in use, as ranges with their purposes (gateway-ip, dns-server, reserved, dynamic, assigned-ip, neighbour)."},
		{Method: "GET", Path: "subnets/{id}/", Op: "unreserved_ip_ranges", Handler: "SubnetHandler", Handle: subnetUnreservedRanges,
			Doc: "The subnet's free addresses, as ranges."},
		{Method: "GET", Path: "subnets/{id}/", Op: "statistics", Handler: "SubnetHandler", Handle: subnetStatistics,
			Doc: "The subnet's usage: addresses available, unavailable, the largest free range (include_ranges)."},
		{Method: "PUT", Path: "subnets/{id}/", Handler: "SubnetHandler", Handle: notServed(whySubnets),
			Doc: "501: " + whySubnets + "."},
		{Method: "DELETE", Path: "subnets/{id}/", Handler: "SubnetHandler", Handle: notServed(whySubnets),
			Doc: "501: " + whySubnets + "."},

		{Method: "GET", Path: "ipaddresses/", Handler: "IPAddressesHandler", Handle: ipAddressesRead,
			Doc: "The caller's reservations (ip=; admins: owner=, all=true for every address in use)."},
		{Method: "POST", Path: "ipaddresses/", Op: "reserve", Handler: "IPAddressesHandler", Handle: ipAddressesReserve,
			Doc: "Reserve an address (ip, or a subnet's next free one; mac, hostname): DHCP never hands it out until released."},
		{Method: "POST", Path: "ipaddresses/", Op: "release", Handler: "IPAddressesHandler", Handle: ipAddressesRelease,
			Doc: "Release one of the caller's reservations (admins: force=true, anyone's)."},

		{Method: "GET", Path: "ipranges/", Handler: "IPRangesHandler", Handle: ipRangesRead,
			Doc: "Every subnet's dynamic and reserved ranges."},
		{Method: "POST", Path: "ipranges/", Handler: "IPRangesHandler", Handle: notServed(whyRanges),
			Doc: "501: " + whyRanges + "."},
		{Method: "GET", Path: "ipranges/{id}/", Handler: "IPRangeHandler", Handle: ipRangeRead,
			Doc: "One range, by id."},
		{Method: "PUT", Path: "ipranges/{id}/", Handler: "IPRangeHandler", Handle: notServed(whyRanges),
			Doc: "501: " + whyRanges + "."},
		{Method: "DELETE", Path: "ipranges/{id}/", Handler: "IPRangeHandler", Handle: notServed(whyRanges),
			Doc: "501: " + whyRanges + "."},

		{Method: "GET", Path: "domains/", Handler: "DomainsHandler", Handle: domainsRead,
			Doc: "The subnets' domains, rackd's DNS zones (the first subnet's is the default)."},
		{Method: "POST", Path: "domains/", Handler: "DomainsHandler", Handle: notServed(whyDomains),
			Doc: "501: " + whyDomains + "."},
		{Method: "GET", Path: "domains/{id}/", Handler: "DomainHandler", Handle: domainRead,
			Doc: "One domain, by id or name."},
		{Method: "PUT", Path: "domains/{id}/", Handler: "DomainHandler", Handle: notServed(whyDomains),
			Doc: "501: " + whyDomains + "."},
		{Method: "DELETE", Path: "domains/{id}/", Handler: "DomainHandler", Handle: notServed(whyDomains),
			Doc: "501: " + whyDomains + "."},

		{Method: "GET", Path: "dnsresources/", Handler: "DNSResourcesHandler", Handle: dnsResourcesRead,
			Doc: "The named reservations' names (all=true: the machines' too; domain, name, fqdn, rrtype filter)."},
		{Method: "POST", Path: "dnsresources/", Handler: "DNSResourcesHandler", Handle: notServed(whyDNS),
			Doc: "501: " + whyDNS + "."},
		{Method: "GET", Path: "dnsresources/{id}/", Handler: "DNSResourceHandler", Handle: dnsResourceRead,
			Doc: "One name, by id or FQDN."},
		{Method: "PUT", Path: "dnsresources/{id}/", Handler: "DNSResourceHandler", Handle: notServed(whyDNS),
			Doc: "501: " + whyDNS + "."},
		{Method: "DELETE", Path: "dnsresources/{id}/", Handler: "DNSResourceHandler", Handle: notServed(whyDNS),
			Doc: "501: " + whyDNS + "."},

		{Method: "GET", Path: "boot-resources/", Handler: "BootResourcesHandler", Handle: bootResourcesRead,
			Doc: "rackd's imported images as uploaded boot resources (type= filters)."},
		{Method: "POST", Path: "boot-resources/", Handler: "BootResourcesHandler", Handle: notServed(whyImages),
			Doc: "501: " + whyImages + "."},
		{Method: "POST", Path: "boot-resources/", Op: "import", Handler: "BootResourcesHandler", Handle: notServed(whyImages),
			Doc: "501: " + whyImages + "."},
		{Method: "GET", Path: "boot-resources/{id}/", Handler: "BootResourceHandler", Handle: bootResourceRead,
			Doc: "One image, by id."},
		{Method: "DELETE", Path: "boot-resources/{id}/", Handler: "BootResourceHandler", Handle: notServed(whyImages),
			Doc: "501: " + whyImages + "."},

		{Method: "GET", Path: "files/", Handler: "FilesHandler", Handle: filesRead,
			Doc: "The caller's files whose names start with prefix=, by name, without content."},
		{Method: "GET", Path: "files/", Op: "get", Handler: "FilesHandler", Handle: filesGet,
			Doc: "The content of the caller's file filename=, as it is."},
		{Method: "GET", Path: "files/", Op: "get_by_key", Handler: "FilesHandler", Handle: filesGetByKey,
			Doc: "The content of the caller's file with that key= (the owner's key is needed: rackd serves no file anonymously)."},
		{Method: "POST", Path: "files/", Handler: "FilesHandler", Handle: filesAdd, BodyLimit: fileBodyLimit,
			Doc: "Store the multipart part \"file\" as the caller's file filename=, replacing one of that name (at most 1 MiB)."},
		{Method: "DELETE", Path: "files/", Handler: "FilesHandler", Handle: filesDelete,
			Doc: "Delete the caller's file filename=."},
		{Method: "GET", Path: "files/{filename}/", Handler: "FileHandler", Handle: fileRead,
			Doc: "The caller's file, its content in base64."},
		{Method: "DELETE", Path: "files/{filename}/", Handler: "FileHandler", Handle: fileDelete,
			Doc: "Delete the caller's file."},
	}
}
