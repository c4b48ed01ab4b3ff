package store

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

func TestTopLevelString(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{`{"id":"m-1","hostname":"a","state":"READY"}`, "READY", true},
		{` { "id" : "m-\"1" , "n":[1,{"state":"X"}],"o":{"state":"Y","a":"}"},"b":true,"c":-1.5e3,"state":"NEW"}`, "NEW", true},
		{`{"id":"m-1"}`, "", false},
		{`{"state":1}`, "", false},
		{`{"state":"a\"b"}`, "", false},
		{`{"sta\u0074e":"X","state":"NEW"}`, "NEW", true}, // an escaped key is not compared, and skipped
		{`{"state":"NEW`, "", false},
		{`[]`, "", false},
		{``, "", false},
		{`{"a":}`, "", false},
		{`{"a":[1,2}`, "", false},
	} {
		got, ok := topLevelString([]byte(tc.in), "state")
		if got != tc.want || ok != tc.ok {
			t.Errorf("topLevelString(%s) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
	// What the store really writes.
	m := Machine{ID: "m-x", Hostname: "h", State: StateDeploying, Arch: "amd64", MACs: []string{"52:54:00:00:00:01"},
		Power: PowerParams{Driver: "ipmi", Password: `p"state":"READY"`}, Created: time.Now(),
		Inventory: &Inventory{Disks: []Disk{{Name: "sda"}}}}
	data, _ := json.Marshal(m)
	if got, ok := topLevelString(data, "state"); !ok || got != string(StateDeploying) {
		t.Errorf("machine record: %q, %v", got, ok)
	}
}

// FuzzTopLevelString: on valid JSON without duplicate top-level keys, a
// value found is the one encoding/json decodes.
func FuzzTopLevelString(f *testing.F) {
	f.Add([]byte(`{"id":"m-1","hostname":"a","state":"READY"}`))
	f.Add([]byte(`{"o":{"state":"Y"},"state":"NEW"}`))
	f.Add([]byte(`{"a":"\\","state":"X"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := topLevelString(data, "state")
		if !ok || !json.Valid(data) {
			return
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.Token() // {
		seen := map[string]bool{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return
			}
			if seen[k.(string)] {
				return // duplicate keys: encoding/json takes the last, the store never writes them
			}
			seen[k.(string)] = true
			var skip json.RawMessage
			if dec.Decode(&skip) != nil {
				return
			}
		}
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			return
		}
		if want, _ := m["state"].(string); want != got {
			t.Fatalf("topLevelString(%s) = %q, encoding/json says %q", data, got, want)
		}
	})
}
