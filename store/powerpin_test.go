package store_test

import (
	"strings"
	"testing"

	"rackd/store"
	"rackd/store/storetest"
)

// TestRedfishPowerParams: what the redfish driver's parameters may be, and
// how they are normalized.
func TestRedfishPowerParams(t *testing.T) {
	fp := strings.Repeat("ab", 32)
	colons := "SHA256:" + strings.ToUpper(strings.TrimSuffix(strings.Repeat("ab:", 32), ":"))
	for name, tc := range map[string]struct {
		p    store.PowerParams
		want store.PowerParams // when valid
		err  string
	}{
		"https address, fingerprint normalized, mode lower-cased": {
			p:    store.PowerParams{Driver: "redfish", Address: "https://10.0.0.5", TLSFingerprint: colons, BootMode: "UEFI"},
			want: store.PowerParams{Driver: "redfish", Address: "https://10.0.0.5", TLSFingerprint: fp, BootMode: "uefi"}},
		"a system named": {p: store.PowerParams{Driver: "redfish", Address: "10.0.0.5:8443/redfish/v1/Systems/2", InsecureTLS: true},
			want: store.PowerParams{Driver: "redfish", Address: "10.0.0.5:8443/redfish/v1/Systems/2", InsecureTLS: true}},
		"short fingerprint":      {p: store.PowerParams{Driver: "redfish", TLSFingerprint: "abcd"}, err: "64 hex digits"},
		"pinned and insecure":    {p: store.PowerParams{Driver: "redfish", TLSFingerprint: fp, InsecureTLS: true}, err: "exclude each other"},
		"a boot mode of nothing": {p: store.PowerParams{Driver: "redfish", BootMode: "bios"}, err: "want uefi, legacy"},
		"TLS for ipmi":           {p: store.PowerParams{Driver: "ipmi", Address: "10.0.0.5", InsecureTLS: true}, err: "for the redfish power driver"},
		"TLS without a driver":   {p: store.PowerParams{TLSFingerprint: fp}, err: "need a power driver"},
	} {
		t.Run(name, func(t *testing.T) {
			s := storetest.New(t)
			m, err := s.CreateMachine(t.Context(), admin, store.NewMachine{Hostname: "r1", MACs: []string{nextMAC()}, Power: tc.p})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("CreateMachine(%+v) = %v, want an error saying %q", tc.p, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.Power != tc.want {
				t.Fatalf("stored %+v, want %+v", m.Power, tc.want)
			}
		})
	}
}

// TestPinPowerCertificate: trust on first use is recorded once; another
// fingerprint is refused; a changed address voids the pin.
func TestPinPowerCertificate(t *testing.T) {
	s := storetest.New(t)
	fp1, fp2 := strings.Repeat("11", 32), strings.Repeat("22", 32)
	m, err := s.CreateMachine(t.Context(), admin, store.NewMachine{Hostname: "r1", MACs: []string{nextMAC()},
		Power: store.PowerParams{Driver: "redfish", Address: "https://10.0.0.5", Username: "u", Password: "pw"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PinPowerCertificate(t.Context(), m.ID, "https://10.0.0.5", fp1); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Machine(m.ID); got.Power.TLSFingerprint != fp1 {
		t.Fatalf("pinned %q, want %s", got.Power.TLSFingerprint, fp1)
	}
	evs, err := s.Events(m.ID, 0)
	if err != nil || !strings.Contains(evs[len(evs)-1].Reason, "trusted on first use") {
		t.Fatalf("no event for the pin: %+v %v", evs, err)
	}
	if err := s.PinPowerCertificate(t.Context(), m.ID, "https://10.0.0.5", fp1); err != nil {
		t.Fatalf("the same fingerprint again: %v", err)
	}
	err = s.PinPowerCertificate(t.Context(), m.ID, "https://10.0.0.5", fp2)
	wantCode(t, err, store.CodeConflict)
	if !strings.Contains(err.Error(), fp1) || !strings.Contains(err.Error(), fp2) {
		t.Fatalf("refusal does not name both fingerprints: %v", err)
	}
	err = s.PinPowerCertificate(t.Context(), m.ID, "https://10.0.0.6", fp2)
	wantCode(t, err, store.CodeConflict)
	// A new address clears the pin (another BMC), unless the patch sets one.
	got, err := s.UpdateMachine(t.Context(), admin, m.ID, store.MachinePatch{Power: store.PowerPatch{Address: ptr("https://10.0.0.6")}})
	if err != nil || got.Power.TLSFingerprint != "" {
		t.Fatalf("after a new address: %+v %v", got.Power, err)
	}
	if fp, err := s.MachineForPower(m.ID); err != nil || fp.Power.Password != "pw" {
		t.Fatalf("the password did not survive the pin and the new address: %v", err)
	}
	got, err = s.UpdateMachine(t.Context(), admin, m.ID, store.MachinePatch{Power: store.PowerPatch{Address: ptr("https://10.0.0.7"), TLSFingerprint: ptr(fp2)}})
	if err != nil || got.Power.TLSFingerprint != fp2 {
		t.Fatalf("a new address with its fingerprint: %+v %v", got.Power, err)
	}
	// Clearing it re-arms trust on first use; the opt-out makes pins moot.
	got, err = s.UpdateMachine(t.Context(), admin, m.ID, store.MachinePatch{Power: store.PowerPatch{TLSFingerprint: ptr(""), InsecureTLS: ptr(true)}})
	if err != nil || got.Power.TLSFingerprint != "" || !got.Power.InsecureTLS {
		t.Fatalf("clear and opt out: %+v %v", got.Power, err)
	}
	if err := s.PinPowerCertificate(t.Context(), m.ID, "https://10.0.0.7", fp1); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Machine(m.ID); got.Power.TLSFingerprint != "" {
		t.Fatalf("a pin was recorded for a machine that opted out: %+v", got.Power)
	}
}
