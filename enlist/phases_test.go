package enlist

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestReportValidate(t *testing.T) {
	sha := strings.Repeat("a", 64)
	for _, tc := range []struct {
		r   Report
		err string
	}{
		{Report{Machine: "m-abc"}, ""},
		{Report{Machine: "m-abc", Disk: "vda", Bytes: 10, SHA256: sha, Erased: []string{"vda", "nvme0n1"}}, ""},
		{Report{Machine: ""}, "machine"},
		{Report{Machine: "M-ABC/../x"}, "machine"},
		{Report{Machine: "m-abc", Error: strings.Repeat("x", MaxReportError+1)}, "longer"},
		{Report{Machine: "m-abc", Bytes: -1}, "negative"},
		{Report{Machine: "m-abc", Disk: "../sda"}, "disk name"},
		{Report{Machine: "m-abc", SHA256: "AB"}, "sha256"},
		{Report{Machine: "m-abc", Inventory: &Inventory{}}, "macs"},
	} {
		err := tc.r.Validate()
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%+v: %v, want %q", tc.r, err, tc.err)
		}
	}
}

// FuzzReport: whatever an environment sends, decoding and validation
// neither panic nor accept what they should refuse.
func FuzzReport(f *testing.F) {
	for _, s := range []string{`{"machine":"m-abc"}`, `{"machine":"m-abc","error":"x","disk":"vda","bytes":5,"sha256":"` +
		strings.Repeat("0", 64) + `"}`, `{"machine":"m-a","inventory":{"macs":["52:54:00:00:00:01"]}}`, `{"erased":["a","b"]}`, `[]`, `{`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var r Report
		if json.Unmarshal(data, &r) != nil {
			return
		}
		if r.Validate() == nil {
			if !machineIDRE.MatchString(r.Machine) || len(r.Error) > MaxReportError || r.Bytes < 0 {
				t.Fatalf("accepted %+v", r)
			}
		}
	})
}

func TestCredentialRequestValidate(t *testing.T) {
	for _, tc := range []struct {
		req CredentialRequest
		err string
	}{
		{CredentialRequest{Machine: "m-1", MAC: "52:54:00:00:00:01"}, ""},
		{CredentialRequest{Machine: "M 1", MAC: "52:54:00:00:00:01"}, "machine"},
		{CredentialRequest{Machine: "m-1", MAC: "52:54:00"}, "mac"},
		{CredentialRequest{Machine: "m-1", MAC: "02:00:00:00:00:00:00:01"}, "mac"},
	} {
		err := tc.req.Validate()
		if (tc.err == "") != (err == nil) || err != nil && !strings.HasPrefix(err.Error(), tc.err) {
			t.Errorf("%+v: %v, want %q", tc.req, err, tc.err)
		}
	}
}
