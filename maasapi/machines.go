package maasapi

import (
	"cmp"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"rackd/power"
	"rackd/store"
)

// Machines as MAAS shows them. Every field a client decodes strictly is
// always there, with MAAS's type; where rackd has no such notion the value
// is the one MAAS gives a machine that lacks it (docs/MAAS-API.md has the
// mapping table).

// maasStatus is one of MAAS's node statuses: its code and its words.
type maasStatus struct {
	code int
	name string
	// filter is the word machines/?status= takes (MAAS's NODE_STATUS
	// names, lower case).
	filter string
}

// statusKey is what decides a machine's MAAS status: its rackd state, and
// for a release whether it erases the disks first.
type statusKey struct {
	state   store.State
	erasing bool
}

// statuses maps rackd's lifecycle onto MAAS's node statuses: the one table
// of it (docs/MAAS-API.md shows it too).
var statuses = map[statusKey]maasStatus{
	{store.StateNew, false}:                 {0, "New", "new"},
	{store.StateCommissioning, false}:       {1, "Commissioning", "commissioning"},
	{store.StateFailedCommissioning, false}: {2, "Failed commissioning", "failed_commissioning"},
	{store.StateReady, false}:               {4, "Ready", "ready"},
	{store.StateAllocated, false}:           {10, "Allocated", "allocated"},
	{store.StateDeploying, false}:           {9, "Deploying", "deploying"},
	{store.StateDeployed, false}:            {6, "Deployed", "deployed"},
	{store.StateFailedDeployment, false}:    {11, "Failed deployment", "failed_deployment"},
	{store.StateReleasing, false}:           {12, "Releasing", "releasing"},
	{store.StateReleasing, true}:            {14, "Disk erasing", "disk_erasing"},
	{store.StateBroken, false}:              {8, "Broken", "broken"},
	{store.StateRetired, false}:             {7, "Retired", "retired"},
}

func statusOf(m store.Machine) maasStatus {
	if st, ok := statuses[statusKey{m.State, m.State == store.StateReleasing && m.Erase}]; ok {
		return st
	}
	// A state the table lacks is a bug the table's test catches; answer
	// something a client can decode meanwhile.
	return maasStatus{3, "Missing", "missing"}
}

// powerTypes maps rackd's power drivers onto MAAS's power types: a machine
// without a driver is powered by hand, MAAS's "manual".
func powerType(driver string) string {
	if driver == "" {
		return "manual"
	}
	return driver
}

// maasArch is MAAS's architecture: arch/subarch.
func maasArch(arch string) string {
	if arch == "" {
		return ""
	}
	return arch + "/generic"
}

// Block devices as MAAS shows them: the inventory's disks, unused (rackd
// writes the deploy image to the first), with MAAS's defaults.
type blockDeviceJSON struct {
	ID                 int      `json:"id"`
	Name               string   `json:"name"`
	Type               string   `json:"type"`
	Path               string   `json:"path"`
	IDPath             *string  `json:"id_path"`
	Model              *string  `json:"model"`
	Serial             *string  `json:"serial"`
	FirmwareVersion    *string  `json:"firmware_version"`
	Size               int64    `json:"size"`
	BlockSize          int      `json:"block_size"`
	UsedSize           int64    `json:"used_size"`
	AvailableSize      int64    `json:"available_size"`
	UsedFor            string   `json:"used_for"`
	Tags               []string `json:"tags"`
	UUID               *string  `json:"uuid"`
	Filesystem         any      `json:"filesystem"`
	Partitions         []any    `json:"partitions"`
	PartitionTableType *string  `json:"partition_table_type"`
	StoragePool        *string  `json:"storage_pool"`
	NUMANode           int      `json:"numa_node"`
	SystemID           string   `json:"system_id"`
	ResourceURI        string   `json:"resource_uri"`
}

// linkJSON is one address of an interface.
type linkJSON struct {
	ID        int         `json:"id"`
	Mode      string      `json:"mode"`
	IPAddress string      `json:"ip_address,omitempty"`
	Subnet    *subnetJSON `json:"subnet,omitempty"`
}

type discoveredJSON struct {
	IPAddress string     `json:"ip_address"`
	Subnet    subnetJSON `json:"subnet"`
}

// interfaceJSON is a machine's NIC: rackd knows its MACs, each one
// physical interface on the one untagged VLAN.
type interfaceJSON struct {
	ID             int              `json:"id"`
	Name           string           `json:"name"`
	Type           string           `json:"type"`
	Enabled        bool             `json:"enabled"`
	MACAddress     string           `json:"mac_address"`
	VLAN           *vlanJSON        `json:"vlan"`
	Links          []linkJSON       `json:"links"`
	Discovered     []discoveredJSON `json:"discovered"`
	EffectiveMTU   int              `json:"effective_mtu"`
	Parents        []string         `json:"parents"`
	Children       []string         `json:"children"`
	Tags           []string         `json:"tags"`
	Params         string           `json:"params"`
	Vendor         *string          `json:"vendor"`
	Product        *string          `json:"product"`
	LinkConnected  bool             `json:"link_connected"`
	InterfaceSpeed int              `json:"interface_speed"`
	LinkSpeed      int              `json:"link_speed"`
	NUMANode       int              `json:"numa_node"`
	SystemID       string           `json:"system_id"`
	ResourceURI    string           `json:"resource_uri"`
}

// machineJSON is a machine as MAAS's API 2.0 shows one.
type machineJSON struct {
	SystemID      string            `json:"system_id"`
	Hostname      string            `json:"hostname"`
	FQDN          string            `json:"fqdn"`
	Domain        domainJSON        `json:"domain"`
	Description   string            `json:"description"`
	NodeType      int               `json:"node_type"`
	NodeTypeName  string            `json:"node_type_name"`
	Status        int               `json:"status"`
	StatusName    string            `json:"status_name"`
	StatusMessage string            `json:"status_message"`
	StatusAction  string            `json:"status_action"`
	Owner         *string           `json:"owner"`
	OwnerData     map[string]string `json:"owner_data"`
	Locked        bool              `json:"locked"`
	TagNames      []string          `json:"tag_names"`
	Zone          zoneJSON          `json:"zone"`
	Pool          poolJSON          `json:"pool"`
	Architecture  string            `json:"architecture"`
	CPUCount      int               `json:"cpu_count"`
	CPUSpeed      int               `json:"cpu_speed"`
	Memory        int               `json:"memory"`
	// Storage is the disks' total in MB (MAAS's unit here).
	Storage      float64 `json:"storage"`
	SwapSize     *int64  `json:"swap_size"`
	OSystem      string  `json:"osystem"`
	DistroSeries string  `json:"distro_series"`
	HWEKernel    *string `json:"hwe_kernel"`
	MinHWEKernel string  `json:"min_hwe_kernel"`
	Netboot      bool    `json:"netboot"`
	DisableIPv4  bool    `json:"disable_ipv4"`
	// EphemeralDeploy: rackd always installs to disk.
	EphemeralDeploy        bool               `json:"ephemeral_deploy"`
	PowerType              string             `json:"power_type"`
	PowerState             string             `json:"power_state"`
	IPAddresses            []string           `json:"ip_addresses"`
	BootInterface          *interfaceJSON     `json:"boot_interface"`
	InterfaceSet           []interfaceJSON    `json:"interface_set"`
	BootDisk               *blockDeviceJSON   `json:"boot_disk"`
	PhysicalBlockDeviceSet []blockDeviceJSON  `json:"physicalblockdevice_set"`
	BlockDeviceSet         []blockDeviceJSON  `json:"blockdevice_set"`
	VirtualBlockDeviceSet  []blockDeviceJSON  `json:"virtualblockdevice_set"`
	ISCSIBlockDeviceSet    []blockDeviceJSON  `json:"iscsiblockdevice_set"`
	SpecialFilesystems     []any              `json:"special_filesystems"`
	VolumeGroups           []any              `json:"volume_groups"`
	RAIDs                  []any              `json:"raids"`
	BCaches                []any              `json:"bcaches"`
	CacheSets              []any              `json:"cache_sets"`
	NUMANodeSet            []any              `json:"numanode_set"`
	HardwareInfo           map[string]string  `json:"hardware_info"`
	HardwareUUID           *string            `json:"hardware_uuid"`
	Pod                    any                `json:"pod"`
	ServiceSet             []any              `json:"service_set"`
	DefaultGateways        map[string]any     `json:"default_gateways"`
	TestingStatus          int                `json:"testing_status"`
	TestingStatusName      string             `json:"testing_status_name"`
	CommissioningStatus    int                `json:"commissioning_status"`
	CommissioningStatusNm  string             `json:"commissioning_status_name"`
	AddressTTL             *int               `json:"address_ttl"`
	ResourceURI            string             `json:"resource_uri"`
	ConstraintsByType      *constraintsByType `json:"constraints_by_type,omitempty"`
	AllocationToken        string             `json:"rackd_allocation_token,omitempty"`
	RackdState             string             `json:"rackd_state"`
}

// constraintsByType is allocate's account of how the machine met the
// storage and interface constraints: label -> block device (or interface)
// ids.
type constraintsByType struct {
	Storage    map[string][]int `json:"storage,omitempty"`
	Interfaces map[string][]int `json:"interfaces,omitempty"`
}

// MAAS's script status "not run" for the commissioning and testing fields
// rackd does not keep, and "passed" for a commissioned machine's.
const (
	scriptPending = -1
	scriptPassed  = 2
)

func machineURI(id string) string { return uri("machines", id) }

// viewCtx is what rendering machines needs once per request: the subnets
// (links carry them) and the default domain.
type viewCtx struct {
	subnets []store.Subnet
	images  []store.Image
	domain  domainJSON
	// power and addrs are the machines' power and addresses read for a
	// whole list at once (prefetch); nil: each machine's read in turn.
	power map[string]store.PowerStatus
	addrs map[string][]store.Address
}

// prefetch reads the power and addresses of ms in one transaction each,
// for a list: two per machine would be two thousand for a rack.
func (s *Server) prefetch(v *viewCtx, ms []store.Machine) error {
	var err error
	if v.power, err = s.store.MachinesPower(ms); err != nil {
		return err
	}
	v.addrs, err = s.store.MachinesAddresses(ms)
	return err
}

func (s *Server) newViewCtx() (*viewCtx, error) {
	subnets, err := s.subnets()
	if err != nil {
		return nil, err
	}
	ims, err := s.store.Images()
	if err != nil {
		return nil, err
	}
	v := &viewCtx{subnets: subnets, images: ims, domain: domainOf("")}
	for _, sn := range subnets {
		if d := strings.TrimSuffix(sn.Domain, "."); d != "" {
			v.domain = domainOf(d)
			v.domain.IsDefault = true
			break
		}
	}
	return v, nil
}

// domainOf is a domain as a machine shows it; "" is MAAS's own default,
// "maas" (id 0), which a rack without a subnet domain answers.
func domainOf(name string) domainJSON {
	if name == "" {
		return domainJSON{ID: 0, Name: "maas", Authoritative: true, IsDefault: true, ResourceURI: uri("domains", "0")}
	}
	id := stableID("domain", name)
	return domainJSON{ID: id, Name: name, Authoritative: true, ResourceURI: uri("domains", strconv.Itoa(id))}
}

func (v *viewCtx) subnetFor(p netip.Prefix) *store.Subnet {
	for i := range v.subnets {
		if v.subnets[i].CIDR.Masked() == p.Masked() {
			return &v.subnets[i]
		}
	}
	return nil
}

// machineView renders one machine.
func (s *Server) machineView(v *viewCtx, m store.Machine) machineJSON {
	st := statusOf(m)
	out := machineJSON{
		SystemID: m.ID, Hostname: m.Hostname, Domain: v.domain,
		NodeType: 0, NodeTypeName: "Machine",
		Status: st.code, StatusName: st.name,
		OwnerData: map[string]string{}, TagNames: []string{},
		Zone: zoneView(m.Zone), Pool: poolView(),
		Architecture: maasArch(m.Arch), CPUCount: m.CPUCount, Memory: m.MemoryMB,
		Netboot:   m.State != store.StateDeployed,
		PowerType: powerType(m.Power.Driver), PowerState: "unknown",
		IPAddresses: []string{}, InterfaceSet: []interfaceJSON{},
		PhysicalBlockDeviceSet: []blockDeviceJSON{}, BlockDeviceSet: []blockDeviceJSON{},
		VirtualBlockDeviceSet: []blockDeviceJSON{}, ISCSIBlockDeviceSet: []blockDeviceJSON{},
		SpecialFilesystems: []any{}, VolumeGroups: []any{}, RAIDs: []any{}, BCaches: []any{}, CacheSets: []any{},
		NUMANodeSet: []any{}, ServiceSet: []any{}, DefaultGateways: map[string]any{},
		HardwareInfo:  map[string]string{},
		TestingStatus: scriptPending, TestingStatusName: "Pending",
		CommissioningStatus: scriptPending, CommissioningStatusNm: "Pending",
		ResourceURI: machineURI(m.ID), RackdState: string(m.State),
	}
	if m.Commissioned {
		out.CommissioningStatus, out.CommissioningStatusNm = scriptPassed, "Passed"
	}
	if m.Owner != "" {
		owner := m.Owner
		out.Owner = &owner
	}
	for k, val := range m.OwnerData {
		out.OwnerData[k] = val
	}
	out.TagNames = append(out.TagNames, m.Tags...)
	if m.SystemUUID != "" {
		u := m.SystemUUID
		out.HardwareUUID = &u
	}
	if m.State == store.StateDeploying || m.State == store.StateDeployed || m.State == store.StateFailedDeployment {
		out.OSystem, out.DistroSeries = v.deployedOS(m)
	}
	ps, err := store.PowerStatus{}, error(nil)
	if v.power != nil {
		ps = v.power[m.ID]
	} else {
		ps, err = s.store.MachinePower(m)
	}
	if err == nil {
		switch ps.Observed {
		case power.StateOn:
			out.PowerState = "on"
		case power.StateOff:
			out.PowerState = "off"
		}
	}
	if inv := m.Inventory; inv != nil {
		out.HardwareInfo = map[string]string{"system_vendor": orUnknown(inv.Vendor), "system_product": orUnknown(inv.Product),
			"system_serial": orUnknown(inv.Serial)}
		for i, d := range inv.Disks {
			bd := s.blockDeviceView(m, i, d)
			out.PhysicalBlockDeviceSet = append(out.PhysicalBlockDeviceSet, bd)
			out.BlockDeviceSet = append(out.BlockDeviceSet, bd)
			out.Storage += float64(d.SizeBytes) / 1e6
		}
		if len(out.PhysicalBlockDeviceSet) > 0 {
			bd := out.PhysicalBlockDeviceSet[0]
			out.BootDisk = &bd
		}
	}
	var addrs []store.Address
	if v.addrs != nil {
		addrs = v.addrs[m.ID]
	} else if addrs, err = s.store.MachineAddresses(m); err != nil {
		s.log.Warn("read machine addresses", "machine", m.ID, "err", err)
	}
	for i, mac := range m.MACs {
		iface := s.interfaceView(v, m, i, mac, addrs)
		out.InterfaceSet = append(out.InterfaceSet, iface)
	}
	for _, a := range addrs {
		if a.Kind == store.KindSticky || a.Kind == store.KindDynamic || a.Kind == store.KindReserved {
			out.IPAddresses = append(out.IPAddresses, a.IP.String())
		}
	}
	if len(out.InterfaceSet) > 0 {
		bi := out.InterfaceSet[0]
		out.BootInterface = &bi
	}
	out.FQDN = m.Hostname + "." + out.Domain.Name
	// The machine's own domain: its boot address's subnet's.
	for _, a := range addrs {
		if a.Kind != store.KindSticky {
			continue
		}
		if sn := v.subnetFor(a.Subnet); sn != nil && strings.TrimSuffix(sn.Domain, ".") != "" {
			out.Domain = domainOf(strings.TrimSuffix(sn.Domain, "."))
			out.Domain.IsDefault = out.Domain.Name == v.domain.Name
			out.FQDN = fqdn(m.Hostname, sn.Domain)
			break
		}
	}
	return out
}

func orUnknown(s string) string {
	if s == "" {
		return "Unknown"
	}
	return s
}

// blockDeviceView is the inventory's i-th disk.
func (s *Server) blockDeviceView(m store.Machine, i int, d store.Disk) blockDeviceJSON {
	id := blockDeviceID(m, i)
	bd := blockDeviceJSON{ID: id, Name: d.Name, Type: "physical", Path: "/dev/disk/by-dname/" + d.Name,
		Size: d.SizeBytes, BlockSize: 512, AvailableSize: d.SizeBytes, UsedFor: "Unused", Tags: []string{},
		Partitions: []any{}, SystemID: m.ID, ResourceURI: uri("nodes", m.ID, "blockdevices", strconv.Itoa(id))}
	if d.Model != "" {
		model := d.Model
		bd.Model = &model
	}
	if d.Serial != "" {
		serial := d.Serial
		bd.Serial = &serial
	}
	return bd
}

// blockDeviceID is the id of a machine's i-th disk.
func blockDeviceID(m store.Machine, i int) int {
	return stableID("blockdevice", m.ID+"/"+strconv.Itoa(i))
}

// interfaceView is the machine's i-th MAC as a physical interface, its
// addresses as links: a sticky address is MAAS's "auto" link (assigned
// from the subnet and kept), a reservation a "static" one, a lease a
// "dhcp" link with the address discovered.
func (s *Server) interfaceView(v *viewCtx, m store.Machine, i int, mac string, addrs []store.Address) interfaceJSON {
	id := stableID("interface", m.ID+"/"+mac)
	iface := interfaceJSON{ID: id, Name: ifaceName(m, mac), Type: "physical", Enabled: true, MACAddress: mac,
		Links: []linkJSON{}, EffectiveMTU: defaultMTU, Parents: []string{}, Children: []string{},
		Tags: []string{}, LinkConnected: true, SystemID: m.ID,
		ResourceURI: uri("nodes", m.ID, "interfaces", strconv.Itoa(id))}
	if iface.Name == "" {
		iface.Name = "eth" + strconv.Itoa(i)
	}
	vl := theVLAN()
	iface.VLAN = &vl
	for _, a := range addrs {
		if !strings.EqualFold(a.MAC, mac) {
			continue
		}
		var snv *subnetJSON
		if sn := v.subnetFor(a.Subnet); sn != nil {
			x := subnetView(*sn)
			snv = &x
		}
		linkID := stableID("link", a.IP.String())
		switch a.Kind {
		case store.KindSticky:
			iface.Links = append(iface.Links, linkJSON{ID: linkID, Mode: "auto", IPAddress: a.IP.String(), Subnet: snv})
		case store.KindReserved:
			iface.Links = append(iface.Links, linkJSON{ID: linkID, Mode: "static", IPAddress: a.IP.String(), Subnet: snv})
		case store.KindDynamic:
			iface.Links = append(iface.Links, linkJSON{ID: linkID, Mode: "dhcp", IPAddress: a.IP.String(), Subnet: snv})
			if snv != nil {
				iface.Discovered = append(iface.Discovered, discoveredJSON{IPAddress: a.IP.String(), Subnet: *snv})
			}
		}
	}
	if len(iface.Links) == 0 {
		// MAAS's link of an interface that is up with no address.
		iface.Links = append(iface.Links, linkJSON{ID: stableID("link", m.ID+"/"+mac), Mode: "link_up"})
	}
	return iface
}

// machineList renders the machines the caller may see, in the order given.
func (s *Server) machineList(c *call, ms []store.Machine) (any, error) {
	v, err := s.newViewCtx()
	if err != nil {
		return nil, err
	}
	ms = slices.DeleteFunc(slices.Clone(ms), func(m store.Machine) bool { return store.MayView(c.who, m, m.ID) != nil })
	if err := s.prefetch(v, ms); err != nil {
		return nil, err
	}
	out := make([]machineJSON, 0, len(ms))
	for _, m := range ms {
		out = append(out, s.machineView(v, m))
	}
	return out, nil
}

// oneMachine renders one machine.
func (s *Server) oneMachine(m store.Machine) (machineJSON, error) {
	v, err := s.newViewCtx()
	if err != nil {
		return machineJSON{}, err
	}
	return s.machineView(v, m), nil
}

// visibleMachine is the machine of the path's system_id, if the caller
// may see it (404 as for no machine otherwise).
func (s *Server) visibleMachine(c *call) (store.Machine, error) {
	id := c.path("system_id")
	m, err := s.store.Machine(id)
	if err != nil {
		if store.CodeOf(err) == store.CodeNotFound {
			return m, errorf(http.StatusNotFound, "No Machine matches the given query: %s", err.Error())
		}
		return m, err
	}
	if err := store.MayView(c.who, m, id); err != nil {
		return m, errorf(http.StatusNotFound, "No Machine matches the given query: %s", err.Error())
	}
	return m, nil
}

// sortedByHostname orders machines as machines/ lists them.
func sortedByHostname(ms []store.Machine) {
	slices.SortFunc(ms, func(a, b store.Machine) int { return cmp.Compare(a.Hostname, b.Hostname) })
}
