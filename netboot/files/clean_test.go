package files

import (
	"errors"
	"io/fs"
	"strings"
	"testing"
)

func TestClean(t *testing.T) {
	long := strings.Repeat("a", MaxNameLen)
	tests := map[string]struct {
		name string
		want string
		kind error // nil: accepted
	}{
		"plain":              {name: "pxelinux.0", want: "pxelinux.0"},
		"one leading slash":  {name: "/pxelinux.0", want: "pxelinux.0"},
		"nested":             {name: "grub/grub.cfg-01-aa-bb-cc-dd-ee-ff", want: "grub/grub.cfg-01-aa-bb-cc-dd-ee-ff"},
		"colons":             {name: "grub/grub.cfg-aa:bb:cc:dd:ee:ff", want: "grub/grub.cfg-aa:bb:cc:dd:ee:ff"},
		"query form":         {name: "ipxe?mac=aa:bb:cc:dd:ee:ff", want: "ipxe?mac=aa:bb:cc:dd:ee:ff"},
		"dots inside names":  {name: "a..b/...", want: "a..b/..."},
		"utf8":               {name: "amorçage", want: "amorçage"},
		"255 bytes":          {name: long, want: long},
		"parent":             {name: "../../etc/passwd", kind: ErrRefused},
		"parent in middle":   {name: "grub/../../etc/passwd", kind: ErrRefused},
		"parent at end":      {name: "grub/..", kind: ErrRefused},
		"slash parent":       {name: "/../etc/passwd", kind: ErrRefused},
		"absolute":           {name: "//etc/passwd", kind: ErrRefused},
		"bare parent":        {name: "..", kind: ErrRefused},
		"empty":              {name: "", kind: ErrInvalid},
		"root":               {name: "/", kind: ErrInvalid},
		"dot":                {name: ".", kind: ErrInvalid},
		"dot element":        {name: "./pxelinux.0", kind: ErrInvalid},
		"double slash":       {name: "grub//grub.cfg", kind: ErrInvalid},
		"trailing slash":     {name: "grub/", kind: ErrInvalid},
		"NUL":                {name: "pxelinux.0\x00../../etc/passwd", kind: ErrInvalid},
		"newline":            {name: "a\nlevel=ERROR msg=forged", kind: ErrInvalid},
		"DEL":                {name: "a\x7f", kind: ErrInvalid},
		"backslash":          {name: `boot\x64\wdsnbp.com`, kind: ErrInvalid},
		"backslash parent":   {name: `..\..\etc\passwd`, kind: ErrInvalid},
		"invalid utf8":       {name: "a\xff", kind: ErrInvalid},
		"256 bytes":          {name: long + "a", kind: ErrInvalid},
		"300 bytes, slashed": {name: "/" + strings.Repeat("b", 299), kind: ErrInvalid},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := Clean(tt.name)
			if tt.kind == nil {
				if err != nil || got != tt.want {
					t.Fatalf("Clean(%q) = %q, %v; want %q", tt.name, got, err, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("Clean(%q) = %q, want %v", tt.name, got, tt.kind)
			}
			var e *Error
			if !errors.As(err, &e) || e.Kind != tt.kind {
				t.Fatalf("Clean(%q) error %v, want kind %v", tt.name, err, tt.kind)
			}
			// Every refusal, invalid or not, is ErrRefused; none is "not found".
			if !errors.Is(err, ErrRefused) || errors.Is(err, ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
				t.Errorf("Clean(%q): %v: Is(ErrRefused)=%v Is(ErrNotFound)=%v", tt.name, err,
					errors.Is(err, ErrRefused), errors.Is(err, ErrNotFound))
			}
			if len(err.Error()) > 200 {
				t.Errorf("message of %d bytes: overlong names must be shortened", len(err.Error()))
			}
		})
	}
}

func TestErrorIs(t *testing.T) {
	nf := notFound("x", "", nil)
	if !errors.Is(nf, ErrNotFound) || !errors.Is(nf, fs.ErrNotExist) || errors.Is(nf, ErrRefused) {
		t.Errorf("not found: %v", nf)
	}
	inv := invalid("x", "NUL byte")
	if !errors.Is(inv, ErrInvalid) || !errors.Is(inv, ErrRefused) || errors.Is(inv, ErrNotFound) {
		t.Errorf("invalid: %v", inv)
	}
	ref := refused("x", "", fs.ErrPermission)
	if !errors.Is(ref, ErrRefused) || errors.Is(ref, ErrInvalid) || !errors.Is(ref, fs.ErrPermission) {
		t.Errorf("refused: %v", ref)
	}
}
