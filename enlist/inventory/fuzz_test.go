package inventory

import (
	"testing"
	"testing/fstest"
)

// The parsers read files a kernel (or a broken firmware) wrote: whatever
// they contain, they must not panic, and what Collect returns must be an
// inventory rackd accepts.

func FuzzParseCPUList(f *testing.F) {
	for _, s := range []string{"0", "0-3,8,10-11", "", "3-1", "0-9999999999999999999", ",", "1-2-3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseCPUList(s)
		if err == nil && (n < 0 || n > 1<<16) {
			t.Fatalf("ParseCPUList(%q) = %d", s, n)
		}
	})
}

func FuzzParseMeminfo(f *testing.F) {
	f.Add([]byte("MemTotal:       24684092 kB\n"))
	f.Add([]byte("MemTotal: -1 kB\n"))
	f.Add([]byte("MemTotal:\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := ParseMeminfo(b)
		if err == nil && n < 0 {
			t.Fatalf("ParseMeminfo(%q) = %d", b, n)
		}
	})
}

func FuzzParseCmdline(f *testing.F) {
	f.Add(`console=ttyS0 rackd.url=http://10.0.0.1:5240 msg="a b"`)
	f.Add(`"unterminated rackd.url=x`)
	f.Fuzz(func(t *testing.T, s string) {
		ParseCmdline(s, "rackd.url")
	})
}

// FuzzCollect fills the files Collect reads with arbitrary bytes.
func FuzzCollect(f *testing.F) {
	f.Add("52:54:00:12:34:56", "1", "0-3", "8000000", "online", "MemTotal: 1024 kB", "2048", "Model\x00X", "UUID")
	f.Add("zz", "32", "3-1", "zz", "offline", "", "-5", "", "")
	f.Add("52:54:00:12:34:56", "1", "", "0", "", "processor : 0", "99999999999999999999", "\xff\xfe", "\x7f")
	f.Fuzz(func(t *testing.T, mac, typ, online, blockSize, state, meminfo, size, model, uuid string) {
		fsys := fstest.MapFS{
			"sys/class/net/eth0/address":                 {Data: []byte(mac)},
			"sys/class/net/eth0/type":                    {Data: []byte(typ)},
			"sys/class/net/eth0/device":                  {Data: nil},
			"sys/class/net/eth1/address":                 {Data: []byte("52:54:00:00:00:01")},
			"sys/class/net/eth1/device":                  {Data: nil},
			"sys/devices/system/cpu/online":              {Data: []byte(online)},
			"proc/cpuinfo":                               {Data: []byte(meminfo)},
			"sys/devices/system/memory/block_size_bytes": {Data: []byte(blockSize)},
			"sys/devices/system/memory/memory0/state":    {Data: []byte(state)},
			"proc/meminfo":                               {Data: []byte(meminfo)},
			"sys/block/sda/size":                         {Data: []byte(size)},
			"sys/block/sda/device/model":                 {Data: []byte(model)},
			"sys/class/dmi/id/product_uuid":              {Data: []byte(uuid)},
			"sys/class/dmi/id/sys_vendor":                {Data: []byte(model)},
		}
		inv, _, err := Collect(fsys, "amd64")
		if err != nil {
			t.Fatalf("eth1 is always there, yet: %v", err)
		}
		if err := inv.Validate(); err != nil {
			t.Fatalf("collected inventory %+v does not validate: %v", inv, err)
		}
	})
}
