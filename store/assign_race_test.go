package store

import (
	"context"
	"net/netip"
	"testing"
)

// Two requests for "an address" of one interface that race: the API's and
// the sticky address given at commissioning, say, each with the candidate
// it probed. Deciding "has it one already?" outside the assignment (a read,
// then an assignment of the probed address) lets both see none, and the
// second then replaces the first's address with its own: one interface,
// two addresses one after the other, and the first answer is stale. Decided
// in the assignment's transaction, the second is answered with the first's
// address and changes nothing.
func TestAssignKeepCurrentRace(t *testing.T) {
	tests := map[string][2]netip.Addr{
		"probed candidates": {netip.MustParseAddr("10.9.0.20"), netip.MustParseAddr("10.9.0.21")},
		"no candidates":     {},
	}
	for name, cands := range tests {
		t.Run(name, func(t *testing.T) {
			// One operation at a time on a shared engine too: the
			// order they queue in is the order they run in.
			s := openTest(t, Options{MaxInFlight: 1}, true)
			ctx := context.Background()
			if _, err := s.CreateSubnet(ctx, testAdmin, Subnet{CIDR: netip.MustParsePrefix("10.9.0.0/24"),
				Gateway: netip.MustParseAddr("10.9.0.1")}); err != nil {
				t.Fatal(err)
			}
			m := mustCreate(t, s, "web1", 1, StateReady)
			release := blockCommitter(t, s)
			results := make([]chan Assignment, 2)
			for i := range results {
				results[i] = make(chan Assignment, 1)
				n := len(s.ops)
				go func() {
					res, err := s.AssignMachineAddress(ctx, testAdmin, AssignRequest{Machine: m.ID, MAC: m.MACs[0],
						KeepCurrent: true, Candidate: cands[i]})
					if err != nil {
						t.Errorf("request %d: %v", i, err)
					}
					results[i] <- res
				}()
				waitQueued(t, s, n+1)
			}
			release()
			first, second := <-results[0], <-results[1]
			if first.Existing || !second.Existing || second.Address != first.Address {
				t.Errorf("first %+v, second %+v; want the second answered with the first's address", first, second)
			}
			var sticky []Address
			if err := s.view(func(tx *Tx) error {
				recs, err := tx.addressesOfMAC(m.MACs[0])
				sticky = recs
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if len(sticky) != 1 || sticky[0].IP != first.Address.IP {
				t.Errorf("the interface has %+v, want only %s", sticky, first.Address.IP)
			}
			evs, _ := s.Events(m.ID, 0)
			assigns := 0
			for _, e := range evs {
				if e.Action == "ip-assign" {
					assigns++
				}
			}
			if assigns != 1 {
				t.Errorf("%d ip-assign events, want 1: %+v", assigns, evs)
			}
		})
	}
}
