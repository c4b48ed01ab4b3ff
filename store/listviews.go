package store

// Bulk reads for listings: what MachinePower and MachineAddresses say of
// each machine of a list, read in one transaction instead of two per
// machine (a rack's listing is a thousand machines).

// MachinesPower is MachinePower of each of ms: machine id -> status.
func (s *Store) MachinesPower(ms []Machine) (map[string]PowerStatus, error) {
	out := make(map[string]PowerStatus, len(ms))
	err := s.view(func(t *Tx) error {
		for _, m := range ms {
			ps, err := t.powerStatus(m)
			if err != nil {
				return err
			}
			out[m.ID] = ps
		}
		return nil
	})
	return out, err
}

// MachinesAddresses is MachineAddresses of each of ms: machine id -> its
// live addresses (none: no entry).
func (s *Store) MachinesAddresses(ms []Machine) (map[string][]Address, error) {
	out := make(map[string][]Address, len(ms))
	err := s.view(func(t *Tx) error {
		for _, m := range ms {
			for _, mac := range m.MACs {
				recs, err := t.addressesOfMAC(mac)
				if err != nil {
					return err
				}
				for _, a := range recs {
					if a.live(t.now) {
						out[m.ID] = append(out[m.ID], a)
					}
				}
			}
		}
		return nil
	})
	return out, err
}
