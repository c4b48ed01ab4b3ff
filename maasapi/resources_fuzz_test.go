package maasapi

import (
	"net/netip"
	"strconv"
	"testing"
)

// FuzzSubnetSpec: a subnet specifier from a client never panics, and what
// it names is what it says.
func FuzzSubnetSpec(f *testing.F) {
	for _, s := range []string{"12", "-1", "id:7", "cidr:10.0.0.0/24", "name:2001:db8::/64", "10.0.0.0/24", " 10.0.0.5/24 ",
		"id:10.0.0.0/24", "cidr:12", "name:", "", "fabric-0", "cidr:cidr:10.0.0.0/8", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		sp, ok := parseSubnetSpec(spec)
		if !ok {
			return
		}
		if sp.hasID {
			if again, ok := parseSubnetSpec("id:" + strconv.Itoa(sp.id)); !ok || again != sp {
				t.Fatalf("%q read as id %d, which reads back as %+v", spec, sp.id, again)
			}
			return
		}
		if !sp.cidr.IsValid() || sp.cidr != sp.cidr.Masked() {
			t.Fatalf("%q read as %v", spec, sp.cidr)
		}
		if again, ok := parseSubnetSpec("cidr:" + sp.cidr.String()); !ok || again != sp {
			t.Fatalf("%q read as %v, which reads back as %+v", spec, sp.cidr, again)
		}
		if _, err := netip.ParsePrefix(sp.cidr.String()); err != nil {
			t.Fatal(err)
		}
	})
}
