package boot

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// API is the little of rackd's API the init uses after rackd is healthy,
// with the admin token.
type API struct {
	Base   string // http://127.0.0.1:5240
	Token  string
	Client *http.Client
}

func (a API) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.Base+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+a.Token)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	c := a.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
	}
	return nil
}

// RackSubnet is the subnet rackd manages on a rack interface with address
// addr: the network, and DHCP's dynamic range .100 to .199 of it (for
// networks smaller than a /24, the upper half but the broadcast address).
func RackSubnet(addr netip.Prefix) (cidr netip.Prefix, start, end netip.Addr, err error) {
	if !addr.Addr().Is4() || addr.Bits() > 30 || addr.Bits() < 8 {
		return netip.Prefix{}, netip.Addr{}, netip.Addr{}, fmt.Errorf("rack address %s: want an IPv4 network of /8 to /30", addr)
	}
	cidr = addr.Masked()
	size := uint32(1) << (32 - addr.Bits())
	lo, hi := uint32(100), uint32(199)
	if size < 256 {
		lo, hi = size/2, size-2
	}
	base := cidr.Addr().As4()
	n := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	at := func(off uint32) netip.Addr {
		v := n + off
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	return cidr, at(lo), at(hi), nil
}

// EnsureSubnet creates the rack subnet of addr unless rackd manages it (or
// a subnet with that CIDR) already. It reports whether it created it.
func (a API) EnsureSubnet(ctx context.Context, addr netip.Prefix) (bool, error) {
	cidr, start, end, err := RackSubnet(addr)
	if err != nil {
		return false, err
	}
	var subnets []struct {
		CIDR string `json:"cidr"`
	}
	if err := a.do(ctx, http.MethodGet, "/api/v1/subnets", nil, &subnets); err != nil {
		return false, err
	}
	for _, s := range subnets {
		if p, err := netip.ParsePrefix(s.CIDR); err == nil && p.Overlaps(cidr) {
			return false, nil
		}
	}
	type rng struct {
		Start string `json:"start"`
		End   string `json:"end"`
	}
	in := map[string]any{"cidr": cidr.String(), "dynamic_ranges": []rng{{start.String(), end.String()}}}
	if err := a.do(ctx, http.MethodPost, "/api/v1/subnets", in, nil); err != nil {
		return false, err
	}
	return true, nil
}

// imageManifest is the part of rackd-image.json (and of the API's image)
// that says whether an image is the same.
type imageManifest struct {
	Name  string `json:"name"`
	Arch  string `json:"arch"`
	Files []struct {
		Path   string `json:"path"`
		SHA256 string `json:"sha256"`
	} `json:"files"`
}

func (m imageManifest) digest() string {
	var l []string
	for _, f := range m.Files {
		l = append(l, f.Path+"="+strings.ToLower(f.SHA256))
	}
	slices.Sort(l)
	return strings.Join(l, ",")
}

// ImageDirs lists the directories under dir (/slot/images) that hold a
// rackd-image.json, at any depth up to two (images/bootloaders/amd64).
func ImageDirs(dir string) ([]string, error) {
	var out []string
	for _, pat := range []string{"*/rackd-image.json", "*/*/rackd-image.json"} {
		m, err := filepath.Glob(filepath.Join(dir, pat))
		if err != nil {
			return nil, err
		}
		for _, f := range m {
			out = append(out, filepath.Dir(f))
		}
	}
	slices.Sort(out)
	return out, nil
}

// ImportImages imports each image directory unless rackd has an image of
// the same name and arch with the same files (path and sha256): a later
// boot, or the same bundle again, imports nothing. It returns the names
// imported; one failed import does not stop the others.
func (a API) ImportImages(ctx context.Context, dirs []string) (imported []string, err error) {
	var have []imageManifest
	if err := a.do(ctx, http.MethodGet, "/api/v1/images", nil, &have); err != nil {
		return nil, err
	}
	var errs []error
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, "rackd-image.json"))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var m imageManifest
		if err := json.Unmarshal(b, &m); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", dir, err))
			continue
		}
		if slices.ContainsFunc(have, func(h imageManifest) bool {
			return h.Name == m.Name && h.Arch == m.Arch && h.digest() == m.digest()
		}) {
			continue
		}
		if err := a.do(ctx, http.MethodPost, "/api/v1/images/import", map[string]any{"dir": dir}, nil); err != nil {
			errs = append(errs, fmt.Errorf("import %s: %w", dir, err))
			continue
		}
		imported = append(imported, m.Name+"/"+m.Arch)
	}
	return imported, errors.Join(errs...)
}
