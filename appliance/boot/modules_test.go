package boot

import (
	"reflect"
	"strings"
	"testing"
)

const aliasFile = `# Aliases extracted from modules themselves.
alias fs-ext4 ext4
alias crypto-crc32c crc32c_generic
alias pci:v00001AF4d*sv*sd*bc*sc*i* virtio_pci
alias virtio:d00000002v* virtio_blk
alias virtio:d00000001v* virtio_net
alias pci:v00008086d000010D3sv*sd*bc*sc*i* e1000e
alias pci:v*d*sv*sd*bc01sc08i02* nvme
alias acpi*:PNP0C0C:* button
alias input:b*v*p*e*-e*k*r*a*m*l*s*f*w* evdev
alias pci:v00008086d000025ABsv*sd*bc*sc*i* i6300esb
alias cpu:type:x86,ven*fam*mod*:feature:*0094* crc32c-intel
not an alias line
alias too many fields here
`

func TestParseModuleAliases(t *testing.T) {
	a, err := ParseModuleAliases(strings.NewReader(aliasFile))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := a["ext4"]; ok {
		t.Errorf("ext4 has only a file-system alias, yet is a driver: %v", a["ext4"])
	}
	if got := a["crc32c_intel"]; len(got) != 1 {
		t.Errorf("crc32c-intel (normalised to crc32c_intel): %v", got)
	}
	if got := a["virtio_pci"]; !reflect.DeepEqual(got, []string{"pci:v00001AF4d*sv*sd*bc*sc*i*"}) {
		t.Errorf("virtio_pci: %v", got)
	}
}

func TestModulesFor(t *testing.T) {
	a, err := ParseModuleAliases(strings.NewReader(aliasFile))
	if err != nil {
		t.Fatal(err)
	}
	list := []string{"virtio_pci", "virtio_blk", "nvme", "ext4", "e1000e", "virtio_net", "button", "evdev", "i6300esb", "crc32c-intel", "crc32c_generic", "not_in_aliases"}
	qemuPCI := []string{
		"pci:v00001AF4d00001001sv00001AF4sd00000002bc01sc00i00", // virtio-blk
		"pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00", // virtio-net
		"pci:v00008086d000025ABsv00001AF4sd00001100bc08sc80i00", // i6300esb
		"acpi:PNP0C0C:",
		"cpu:type:x86,ven0000fam0006mod003F:feature:,0000,0001,0094,00E5",
	}
	afterVirtio := append(append([]string{}, qemuPCI...), "virtio:d00000002v00001AF4", "virtio:d00000001v00001AF4")
	afterButton := append(append([]string{}, afterVirtio...), "input:b0019v0000p0001e0000-e0,1,k74,ramlsfw")
	for _, c := range []struct {
		name       string
		modaliases []string
		skip       map[string]bool
		want       []string
	}{
		{"no devices: only the modules that drive none", nil, nil,
			[]string{"ext4", "crc32c_generic", "not_in_aliases"}},
		{"a QEMU VM's first pass: the buses and what is on PCI", qemuPCI, nil,
			[]string{"virtio_pci", "ext4", "button", "i6300esb", "crc32c-intel", "crc32c_generic", "not_in_aliases"}},
		{"second pass: virtio devices appeared", afterVirtio,
			map[string]bool{"virtio_pci": true, "ext4": true, "button": true, "i6300esb": true, "crc32c_intel": true, "crc32c_generic": true, "not_in_aliases": true},
			[]string{"virtio_blk", "virtio_net"}},
		{"third pass: the button's input device", afterButton,
			map[string]bool{"virtio_pci": true, "virtio_blk": true, "virtio_net": true, "ext4": true, "button": true, "i6300esb": true, "crc32c_intel": true, "crc32c_generic": true, "not_in_aliases": true},
			[]string{"evdev"}},
		{"an NVMe disk (class match) and an Intel NIC", []string{
			"pci:v0000144Dd0000A808sv0000144Dsd0000A801bc01sc08i02",
			"pci:v00008086d000010D3sv00008086sd0000A01Fbc02sc00i00"}, nil,
			[]string{"nvme", "ext4", "e1000e", "crc32c_generic", "not_in_aliases"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := ModulesFor(list, a, c.modaliases, c.skip); !reflect.DeepEqual(got, c.want) {
				t.Errorf("ModulesFor = %v, want %v", got, c.want)
			}
		})
	}
}
