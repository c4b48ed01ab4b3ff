package bootconf

import (
	"errors"
	"net/url"
	"strings"
	"testing"
)

func TestParsePath(t *testing.T) {
	const mac = "aa:bb:cc:dd:ee:0f"
	grub := Request{Kind: GrubMAC, MAC: mac}
	pxe := Request{Kind: PXELinuxMAC, MAC: mac}
	ipxe := Request{Kind: IPXEMAC, MAC: mac}
	tests := map[string]struct {
		path string
		want Request
		err  error
	}{
		// GRUB, in every spelling and under both prefixes.
		"grub colon":                {path: "grub/grub.cfg-aa:bb:cc:dd:ee:0f", want: grub},
		"grub colon upper":          {path: "grub/grub.cfg-AA:BB:CC:DD:EE:0F", want: grub},
		"grub 01 dashes":            {path: "grub/grub.cfg-01-aa-bb-cc-dd-ee-0f", want: grub},
		"grub 01 dashes upper":      {path: "grub/grub.cfg-01-AA-bB-Cc-DD-EE-0F", want: grub},
		"boot/grub colon":           {path: "boot/grub/grub.cfg-aa:bb:cc:dd:ee:0f", want: grub},
		"boot/grub 01 dashes":       {path: "boot/grub/grub.cfg-01-aa-bb-cc-dd-ee-0f", want: grub},
		"grub default amd64":        {path: "grub/grub.cfg-default-amd64", want: Request{Kind: GrubDefault, Arch: "amd64"}},
		"grub default arm64":        {path: "grub/grub.cfg-default-arm64", want: Request{Kind: GrubDefault, Arch: "arm64"}},
		"boot/grub default":         {path: "boot/grub/grub.cfg-default-arm64", want: Request{Kind: GrubDefault, Arch: "arm64"}},
		"grub preloader":            {path: "grub/grub.cfg", want: Request{Kind: GrubPreload}},
		"boot/grub preloader":       {path: "boot/grub/grub.cfg", want: Request{Kind: GrubPreload}},
		"pxelinux 01 dashes":        {path: "pxelinux.cfg/01-aa-bb-cc-dd-ee-0f", want: pxe},
		"pxelinux 01 dashes upper":  {path: "pxelinux.cfg/01-AA-BB-CC-DD-EE-0F", want: pxe},
		"pxelinux default":          {path: "pxelinux.cfg/default", want: Request{Kind: PXELinuxDefault}},
		"ipxe colon":                {path: "ipxe/aa:bb:cc:dd:ee:0f.ipxe", want: ipxe},
		"ipxe dashes (mac:hexhyp)":  {path: "ipxe/aa-bb-cc-dd-ee-0f.ipxe", want: ipxe},
		"ipxe upper":                {path: "ipxe/AA:BB:CC:DD:EE:0F.ipxe", want: ipxe},
		"ipxe query":                {path: "ipxe?mac=aa:bb:cc:dd:ee:0f", want: ipxe},
		"ipxe query escaped":        {path: "ipxe?mac=AA%3Abb%3Acc%3Add%3Aee%3A0f", want: ipxe},
		"ipxe query dashes":         {path: "ipxe?mac=aa-bb-cc-dd-ee-0f", want: ipxe},
		"ipxe query other params":   {path: "ipxe?arch=x86_64&mac=aa:bb:cc:dd:ee:0f", want: ipxe},
		"255 bytes under grub/":     {path: "grub/" + strings.Repeat("x", MaxPathLen-len("grub/")), err: ErrNotConfig},
		"longest accepted non-conf": {path: strings.Repeat("a", MaxPathLen), err: ErrNotConfig},

		// Files of the tree and names firmware tries that rackd does
		// not render: the file tree answers them.
		"bootloader":                  {path: "pxelinux.0", err: ErrNotConfig},
		"grub module":                 {path: "grub/x86_64-efi/normal.mod", err: ErrNotConfig},
		"boot/grub module":            {path: "boot/grub/x86_64-efi/http.mod", err: ErrNotConfig},
		"kernel":                      {path: "images/abc/vmlinuz", err: ErrNotConfig},
		"grub hex IP":                 {path: "grub/grub.cfg-0A000105", err: ErrNotConfig},
		"grub colon with 01 prefix":   {path: "grub/grub.cfg-01-aa:bb:cc:dd:ee:0f", err: ErrNotConfig},
		"grub dashes without 01":      {path: "grub/grub.cfg-aa-bb-cc-dd-ee-0f", err: ErrNotConfig},
		"grub default unknown arch":   {path: "grub/grub.cfg-default-ppc64el", err: ErrNotConfig},
		"grub default upper arch":     {path: "grub/grub.cfg-default-AMD64", err: ErrNotConfig},
		"grub.cfg elsewhere":          {path: "grub.cfg", err: ErrNotConfig},
		"grub other prefix":           {path: "efi/grub/grub.cfg", err: ErrNotConfig},
		"grub short MAC":              {path: "grub/grub.cfg-01-aa-bb-cc-dd-ee", err: ErrNotConfig},
		"grub long MAC":               {path: "grub/grub.cfg-01-aa-bb-cc-dd-ee-ff-00", err: ErrNotConfig},
		"grub non-hex MAC":            {path: "grub/grub.cfg-01-aa-bb-cc-dd-ee-gg", err: ErrNotConfig},
		"grub mixed separators":       {path: "grub/grub.cfg-aa:bb-cc:dd:ee:0f", err: ErrNotConfig},
		"grub trailing junk":          {path: "grub/grub.cfg-aa:bb:cc:dd:ee:0f.bak", err: ErrNotConfig},
		"pxelinux UUID":               {path: "pxelinux.cfg/564d7f2e-9c4c-4b6a-8f1b-1d2e3f4a5b6c", err: ErrNotConfig},
		"pxelinux hex IP":             {path: "pxelinux.cfg/0A000105", err: ErrNotConfig},
		"pxelinux colon MAC":          {path: "pxelinux.cfg/01-aa:bb:cc:dd:ee:0f", err: ErrNotConfig},
		"pxelinux without 01":         {path: "pxelinux.cfg/aa-bb-cc-dd-ee-0f", err: ErrNotConfig},
		"pxelinux other type":         {path: "pxelinux.cfg/06-aa-bb-cc-dd-ee-0f", err: ErrNotConfig},
		"pxelinux Default":            {path: "pxelinux.cfg/Default", err: ErrNotConfig},
		"ipxe static script":          {path: "ipxe/menu.ipxe", err: ErrNotConfig},
		"ipxe without suffix":         {path: "ipxe/aa:bb:cc:dd:ee:0f", err: ErrNotConfig},
		"ipxe binary":                 {path: "ipxe.efi", err: ErrNotConfig},
		"question mark in a file":     {path: "images/a?b", err: ErrNotConfig},
		"ipxe query, wrong path":      {path: "ipxe/?mac=aa:bb:cc:dd:ee:0f", err: ErrNotConfig},
		"dots inside a name are fine": {path: "images/..abc/vmlinuz", err: ErrNotConfig},

		// Refused outright.
		"empty":                 {path: "", err: ErrBadPath},
		"overlong":              {path: strings.Repeat("a", MaxPathLen+1), err: ErrBadPath},
		"overlong config":       {path: "grub/grub.cfg-01-aa-bb-cc-dd-ee-0f" + strings.Repeat("/x", 120), err: ErrBadPath},
		"NUL":                   {path: "grub/grub.cfg\x00", err: ErrBadPath},
		"NUL in the middle":     {path: "pxelinux.cfg/def\x00ault", err: ErrBadPath},
		"absolute":              {path: "/grub/grub.cfg", err: ErrBadPath},
		"absolute etc":          {path: "/etc/passwd", err: ErrBadPath},
		"dotdot":                {path: "../../etc/passwd", err: ErrBadPath},
		"dotdot inside":         {path: "grub/../../etc/passwd", err: ErrBadPath},
		"dotdot at the end":     {path: "grub/..", err: ErrBadPath},
		"dot segment":           {path: "grub/./grub.cfg", err: ErrBadPath},
		"lone dot":              {path: ".", err: ErrBadPath},
		"double slash":          {path: "grub//grub.cfg", err: ErrBadPath},
		"trailing slash":        {path: "grub/", err: ErrBadPath},
		"backslash traversal":   {path: `..\..\windows\win.ini`, err: ErrBadPath},
		"newline":               {path: "grub/grub.cfg\n", err: ErrBadPath},
		"tab":                   {path: "pxelinux.cfg/\tdefault", err: ErrBadPath},
		"DEL":                   {path: "pxelinux.cfg/default\x7f", err: ErrBadPath},
		"invalid UTF-8":         {path: "grub/\xff\xfe", err: ErrBadPath},
		"ipxe query no mac":     {path: "ipxe?", err: ErrBadPath},
		"ipxe query empty mac":  {path: "ipxe?mac=", err: ErrBadPath},
		"ipxe query bad mac":    {path: "ipxe?mac=aa:bb:cc:dd:ee", err: ErrBadPath},
		"ipxe query two macs":   {path: "ipxe?mac=aa:bb:cc:dd:ee:0f&mac=aa:bb:cc:dd:ee:10", err: ErrBadPath},
		"ipxe query bad escape": {path: "ipxe?mac=%zz", err: ErrBadPath},
		"ipxe query dotdot":     {path: "ipxe?mac=../../x", err: ErrBadPath},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParsePath(tc.path)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("ParsePath(%q) = %+v, %v; want %v", tc.path, got, err, tc.err)
				}
				if got != (Request{}) {
					t.Errorf("ParsePath(%q) failed but returned %+v", tc.path, got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParsePath(%q) = %+v, %v; want %+v", tc.path, got, err, tc.want)
			}
			// The canonical path parses back to the same request.
			if again, err := ParsePath(got.Path()); err != nil || again != got {
				t.Errorf("ParsePath(%q) = %+v, %v; want %+v", got.Path(), again, err, got)
			}
		})
	}
}

func TestRequestPath(t *testing.T) {
	const mac = "aa:bb:cc:dd:ee:0f"
	tests := map[Request]string{
		{Kind: GrubMAC, MAC: mac}:            "grub/grub.cfg-01-aa-bb-cc-dd-ee-0f",
		{Kind: GrubDefault, Arch: "arm64"}:   "grub/grub.cfg-default-arm64",
		{Kind: GrubPreload}:                  "grub/grub.cfg",
		{Kind: PXELinuxMAC, MAC: mac}:        "pxelinux.cfg/01-aa-bb-cc-dd-ee-0f",
		{Kind: PXELinuxDefault}:              "pxelinux.cfg/default",
		{Kind: IPXEMAC, MAC: mac}:            "ipxe/aa:bb:cc:dd:ee:0f.ipxe",
		{}:                                   "",
		{Kind: Kind(200), MAC: mac}:          "",
		{Kind: GrubDefault, Arch: "riscv64"}: "grub/grub.cfg-default-riscv64",
	}
	for r, want := range tests {
		if got := r.Path(); got != want {
			t.Errorf("%+v.Path() = %q, want %q", r, got, want)
		}
	}
}

func TestParseIPXEQuery(t *testing.T) {
	tests := map[string]struct {
		query string
		mac   string // empty: ErrBadPath
	}{
		"colon":           {query: "mac=52:54:00:12:34:56", mac: "52:54:00:12:34:56"},
		"upper":           {query: "mac=52:54:00:AB:CD:EF", mac: "52:54:00:ab:cd:ef"},
		"dashes":          {query: "mac=52-54-00-12-34-56", mac: "52:54:00:12:34:56"},
		"escaped colons":  {query: "mac=52%3A54%3A00%3A12%3A34%3A56", mac: "52:54:00:12:34:56"},
		"extra params":    {query: "mac=52:54:00:12:34:56&x=1", mac: "52:54:00:12:34:56"},
		"none":            {query: ""},
		"two":             {query: "mac=52:54:00:12:34:56&mac=52:54:00:12:34:57"},
		"dotted (Cisco)":  {query: "mac=5254.0012.3456"},
		"no separators":   {query: "mac=525400123456"},
		"eight octets":    {query: "mac=52:54:00:12:34:56:78:9a"},
		"spaces":          {query: "mac=+52:54:00:12:34:56"},
		"newline":         {query: "mac=52:54:00:12:34:56%0A"},
		"MAC in the name": {query: "52:54:00:12:34:56"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			q, err := url.ParseQuery(tc.query)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ParseIPXEQuery(q)
			if tc.mac == "" {
				if !errors.Is(err, ErrBadPath) {
					t.Fatalf("ParseIPXEQuery(%q) = %+v, %v; want ErrBadPath", tc.query, got, err)
				}
				return
			}
			if want := (Request{Kind: IPXEMAC, MAC: tc.mac}); err != nil || got != want {
				t.Fatalf("ParseIPXEQuery(%q) = %+v, %v; want %+v", tc.query, got, err, want)
			}
		})
	}
}

func TestKindString(t *testing.T) {
	seen := map[string]bool{}
	for k := GrubMAC; k <= IPXEMAC; k++ {
		s := k.String()
		if seen[s] || strings.HasPrefix(s, "kind(") {
			t.Errorf("Kind %d has name %q, not unique", k, s)
		}
		seen[s] = true
	}
	if got := Kind(0).String(); got != "kind(0)" {
		t.Errorf("Kind(0).String() = %q", got)
	}
}
