package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
)

// Check verifies the invariants that the operations keep, across the whole
// database, and returns every violation it finds (nil when all hold):
// indexes point at records that agree with them, every held machine has its
// allocation and no other machine has one, and every token
// belongs to its user and every user's token to it. Tests run it after every
// scenario; operators can run it after a restore.
func (s *Store) Check() error {
	// A damaged file makes bbolt panic: that is a finding too.
	var err error
	if gerr := guard(func() error { err = s.check(); return nil }); gerr != nil {
		return gerr
	}
	return err
}

// check runs one checker per bucket (or group of buckets that index each
// other) and collects what they find.
func (s *Store) check() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	err := s.view(func(t *Tx) error {
		machines, err := t.checkMachines(bad)
		if err != nil {
			return err
		}
		checkAllocations(machines, bad)
		t.checkUUIDs(machines, bad)
		t.checkMachineIndexes(machines, bad)
		t.checkPower(machines, bad)
		checkCredentials(machines, bad)
		t.checkUsers(bad)
		t.checkTokens(bad)
		t.checkSSHKeys(bad)
		t.checkUserFiles(bad)
		t.checkTagDefs(bad)
		t.checkDeployments(machines, bad)
		t.checkAddresses(machines, bad)
		return nil
	})
	if err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// checkMachines reads the machines bucket: every record decodes, is stored
// under its id and has a known state. It returns the machines by id, for
// the checkers of what refers to them.
func (t *Tx) checkMachines(bad func(string, ...any)) (map[string]Machine, error) {
	machines := map[string]Machine{}
	err := t.tx.Bucket(bucketMachines).ForEach(func(k, v []byte) error {
		var m Machine
		if err := json.Unmarshal(v, &m); err != nil {
			bad("machine %s: undecodable: %v", k, err)
			return nil
		}
		if m.ID != string(k) {
			bad("machine %s: stored under key %s", m.ID, k)
		}
		if !m.State.Valid() {
			bad("machine %s: unknown state %q", m.ID, m.State)
		}
		checkSecrets(m, v, bad)
		machines[m.ID] = m
		return nil
	})
	return machines, err
}

// checkAllocations verifies that every held machine has its allocation, that
// no other machine has one (BROKEN keeps what it had), and that the owner
// and agent name agree with it.
func checkAllocations(machines map[string]Machine, bad func(string, ...any)) {
	for id, m := range machines {
		found := m.Allocation != nil
		var a Allocation
		if found {
			a = *m.Allocation
		}
		switch {
		case holds(m.State) && !found:
			bad("machine %s is %s but has no allocation", id, m.State)
		case found && !holds(m.State) && m.State != StateBroken:
			bad("machine %s is %s but has an allocation (owner %s)", id, m.State, a.Owner)
		case found && (a.Owner != m.Owner || a.AgentName != m.AgentName):
			bad("machine %s: owner/agent %s/%q differ from its allocation's %s/%q", id, m.Owner, m.AgentName, a.Owner, a.AgentName)
		case !found && m.Owner != "":
			bad("machine %s has owner %s but no allocation", id, m.Owner)
		case !found && len(m.OwnerData) > 0:
			bad("machine %s has owner data but no allocation", id)
		}
	}
}

// checkMachineIndexes verifies the hostname, MAC and free indexes both
// ways: each machine is indexed under its hostname and MACs (and under its
// hostname in the free index exactly when it is free), and every entry
// names a machine that agrees.
func (t *Tx) checkMachineIndexes(machines map[string]Machine, bad func(string, ...any)) {
	for id, m := range machines {
		if got := string(t.getRaw(bucketHostnames, []byte(m.Hostname))); got != id {
			bad("machine %s: hostname %s indexed to %q", id, m.Hostname, got)
		}
		for _, mac := range m.MACs {
			if got := string(t.getRaw(bucketMACs, []byte(mac))); got != id {
				bad("machine %s: MAC %s indexed to %q", id, mac, got)
			}
		}
		if got := string(t.getRaw(bucketFree, []byte(m.Hostname))); isFree(m) != (got == id) {
			bad("machine %s (%s, owner %q): free index says %q", id, m.State, m.Owner, got)
		}
	}
	index := func(bucket []byte, has func(Machine, string) bool) {
		t.tx.Bucket(bucket).ForEach(func(k, v []byte) error {
			m, ok := machines[string(v)]
			if !ok || !has(m, string(k)) {
				bad("%s index: %s -> %s does not match a machine", bucket, k, v)
			}
			return nil
		})
	}
	index(bucketFree, func(m Machine, k string) bool { return m.Hostname == k && isFree(m) })
	index(bucketHostnames, func(m Machine, k string) bool { return m.Hostname == k })
	index(bucketMACs, func(m Machine, k string) bool { return slices.Contains(m.MACs, k) })
}

// checkUsers verifies that every user decodes and is stored under its name.
func (t *Tx) checkUsers(bad func(string, ...any)) {
	t.tx.Bucket(bucketUsers).ForEach(func(k, v []byte) error {
		var u User
		if err := json.Unmarshal(v, &u); err != nil {
			bad("user %s: undecodable: %v", k, err)
		} else if u.Name != string(k) {
			bad("user %s: stored under key %s", u.Name, k)
		}
		return nil
	})
}

// checkTokens verifies the API tokens and their hash index both ways: every
// token is stored under its id, belongs to an existing user and is indexed
// under its hash, and every index entry names a token with that hash.
func (t *Tx) checkTokens(bad func(string, ...any)) {
	t.tx.Bucket(bucketAPITokens).ForEach(func(k, v []byte) error {
		var tk Token
		if err := json.Unmarshal(v, &tk); err != nil {
			bad("token %s: undecodable: %v", k, err)
			return nil
		}
		switch {
		case tk.ID != string(k):
			bad("token %s: stored under key %s", tk.ID, k)
		case t.getRaw(bucketUsers, []byte(tk.User)) == nil:
			bad("token %s: user %q does not exist", tk.ID, tk.User)
		case string(t.getRaw(bucketTokens, []byte(tk.Hash))) != tk.ID:
			bad("token %s: its hash is indexed to %q", tk.ID, t.getRaw(bucketTokens, []byte(tk.Hash)))
		}
		return nil
	})
	t.tx.Bucket(bucketTokens).ForEach(func(k, v []byte) error {
		var tk Token
		if found, err := t.get(bucketAPITokens, v, &tk); err != nil || !found || tk.Hash != string(k) {
			bad("token index entry %s names token %s, which does not have that hash", k, v)
		}
		return nil
	})
}

// checkAddresses verifies the subnets and addresses buckets: every address
// is stored under its key, lies in a managed subnet, is in the in-memory
// MAC index when it has a MAC and has a known kind, a sticky address
// belongs to an interface of its machine, and no client holds two live
// dynamic leases in one subnet. On a shared engine every address a MAC's
// lease_macs key lists is bound to that MAC.
func (t *Tx) checkAddresses(machines map[string]Machine, bad func(string, ...any)) {
	type macSubnet struct {
		mac    string
		subnet netip.Prefix
	}
	leases := map[macSubnet][]netip.Addr{}
	bound := map[netip.Addr]string{}
	defer func() {
		for k, ips := range leases {
			if len(ips) > 1 {
				bad("%s holds %d live dynamic leases in %s: %v", k.mac, len(ips), k.subnet, ips)
			}
		}
		if !t.ipam.shared {
			return
		}
		if b := t.tx.Bucket(bucketLeaseMACs); b != nil {
			b.ForEach(func(k, v []byte) error {
				ips, err := decodeLeaseKey(string(k), v)
				if err != nil {
					bad("%v", err)
					return nil
				}
				for _, ip := range ips {
					if bound[ip] != string(k) {
						bad("lease_macs/%s lists %s, bound to %q", k, ip, bound[ip])
					}
				}
				return nil
			})
		}
	}()
	subnets := map[netip.Prefix]bool{}
	t.tx.Bucket(bucketSubnets).ForEach(func(k, v []byte) error {
		var sn Subnet
		if err := json.Unmarshal(v, &sn); err != nil {
			bad("subnet %x: undecodable: %v", k, err)
		} else {
			subnets[sn.CIDR] = true
		}
		return nil
	})
	t.tx.Bucket(bucketAddresses).ForEach(func(k, v []byte) error {
		var a Address
		if err := json.Unmarshal(v, &a); err != nil {
			bad("address %x: undecodable: %v", k, err)
			return nil
		}
		switch {
		case string(ipKey(a.IP)) != string(k):
			bad("address %s stored under key %x", a.IP, k)
		case !subnets[a.Subnet] || !a.Subnet.Contains(a.IP):
			bad("address %s: subnet %s is not managed or does not contain it", a.IP, a.Subnet)
		case a.MAC != "" && !t.ipam.macs.has(a.MAC, a.IP):
			bad("address %s: MAC %s not indexed", a.IP, a.MAC)
		}
		bound[a.IP] = a.MAC
		if a.Kind == KindDynamic && a.MAC != "" && a.live(t.now) {
			k := macSubnet{a.MAC, a.Subnet}
			leases[k] = append(leases[k], a.IP)
		}
		switch a.Kind {
		case KindSticky:
			if m, ok := machines[a.MachineID]; !ok || !slices.Contains(m.MACs, a.MAC) {
				bad("sticky address %s: machine %s has no interface %s", a.IP, a.MachineID, a.MAC)
			}
		case KindDynamic, KindReserved, KindDiscovered:
		default:
			bad("address %s: unknown kind %q", a.IP, a.Kind)
		}
		return nil
	})
}
