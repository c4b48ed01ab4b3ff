package store

import (
	"context"
	"strings"
	"testing"

	"rackd/store/kv"
)

// Check finds tag definitions that break the bucket's invariants.
func TestCheckTagDefs(t *testing.T) {
	ctx := context.Background()
	admin := Actor{Name: "admin", Admin: true}
	for name, tc := range map[string]struct {
		key, value, want string
	}{
		"undecodable": {key: "fast", value: "{", want: "does not decode"},
		"misfiled":    {key: "slow", value: `{"name":"fast"}`, want: `stored under "slow"`},
		"bad name":    {key: "bad tag", value: `{"name":"bad tag"}`, want: "invalid tag"},
	} {
		t.Run(name, func(t *testing.T) {
			s := openTest(t, Options{}, false)
			if _, err := s.DefineTag(ctx, admin, "fast", "NVMe"); err != nil {
				t.Fatal(err)
			}
			if err := s.Check(); err != nil {
				t.Fatalf("before the damage: %v", err)
			}
			err := s.kv.Update(ctx, func(tx kv.Tx) error {
				return tx.Bucket(bucketTagDefs).Put([]byte(tc.key), []byte(tc.value))
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Check(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Check = %v, want a finding with %q", err, tc.want)
			}
		})
	}
}
