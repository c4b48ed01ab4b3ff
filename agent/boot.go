package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sync/atomic"

	"rackd/netboot/bootconf"
	"rackd/netboot/files"
	"rackd/netboot/httpboot"
	"rackd/netboot/tftp"
	"rackd/store"
)

// Boot files: per-MAC configs rendered from the store on every request
// (netboot/bootconf), over the boot file tree <state dir>/boot, served by
// HTTP under /boot/ and, when configured, by TFTP.

// bootSource answers bootconf's questions from the store.
type bootSource struct{ s *store.Store }

func (b bootSource) Machine(ctx context.Context, mac string) (bootconf.MachineInfo, bool, error) {
	m, err := b.s.MachineByMAC(mac)
	if store.CodeOf(err) == store.CodeNotFound {
		return bootconf.MachineInfo{}, false, nil
	}
	if err != nil {
		return bootconf.MachineInfo{}, false, err
	}
	return machineInfo(m), true, nil
}

// machineInfo is what the boot decision reads of a machine.
func machineInfo(m store.Machine) bootconf.MachineInfo {
	return bootconf.MachineInfo{ID: m.ID, Hostname: m.Hostname, State: string(m.State), Arch: m.Arch, Image: m.DeployImage,
		Erase: m.Erase, DiskWritten: !m.DiskWritten.IsZero()}
}

// Environments returns the environments the registry's images make for
// arch (bootconf.EnvironmentsOf is the rule).
func (b bootSource) Environments(ctx context.Context, arch string) (bootconf.Environments, error) {
	ims, err := b.s.Images()
	if err != nil {
		return bootconf.Environments{}, err
	}
	return bootconf.EnvironmentsOf(bootImages(ims), arch), nil
}

// bootImages is the registry's images as the boot rule sees them, each
// file at the boot-tree path of its blob.
func bootImages(ims []store.Image) []bootconf.Image {
	out := make([]bootconf.Image, len(ims))
	for i, im := range ims {
		bi := bootconf.Image{Name: im.Name, Arch: im.Arch, Purpose: im.Purpose, Cmdline: im.Cmdline,
			Files: make([]bootconf.ImageFile, len(im.Files))}
		for j, f := range im.Files {
			bi.Files[j] = bootconf.ImageFile{Role: f.Role, Path: imagePrefix + f.SHA256, SHA256: f.SHA256, Size: f.Size,
				Format: f.Format, RawSize: f.RawSize, RawSHA256: f.RawSHA256, Chunks: f.Chunks}
		}
		out[i] = bi
	}
	return out
}

type baseKey struct{}

// bootBase finds the HTTP base URL a rendered config sends its loader to
// (kernels, initrds, rackd.url): it must be an address the machine reaches.
type bootBase struct {
	// fixed is dhcp.http_url: when set, every TFTP-served config uses it.
	fixed string
	// listen is the HTTP listener's address: the configured one until
	// Serve has the real listener (whose port may have been 0).
	listen atomic.Pointer[string]
}

func newBootBase(cfg Config) *bootBase {
	b := &bootBase{fixed: cfg.DHCP.HTTPURL}
	b.listen.Store(&cfg.Listen)
	return b
}

// serving records the address the HTTP server listens on.
func (b *bootBase) serving(addr net.Addr) {
	s := addr.String()
	b.listen.Store(&s)
}

// forRequest is the base for one request. An HTTP request carries the Host
// the client reached rackd by (serveBoot puts it in ctx), which wins. Then
// dhcp.http_url, when set. Otherwise the base is derived from the address
// the request arrived at (files.LocalAddr: for TFTP, the address the client
// sent its request to), as the DHCP server derives it from the receiving
// interface: see httpBaseFor.
func (b *bootBase) forRequest(ctx context.Context) string {
	if h, ok := ctx.Value(baseKey{}).(string); ok && h != "" {
		return h
	}
	if b.fixed != "" {
		return b.fixed
	}
	local, _ := files.LocalAddr(ctx)
	return httpBaseFor(*b.listen.Load(), local)
}

// httpBaseFor is the HTTP base URL for a client that reached rackd at
// local, when HTTP listens on listen (host:port): that address when HTTP
// listens on one address only (nothing else would answer), and
// http://<local>:<port> when it listens on every address ("0.0.0.0:5240",
// ":5240"), on loopback only (the client is then told an address where
// nothing listens, which rackd warns about at start; a loopback client
// gets loopback), or on a name that is not an address. It returns "" when
// neither gives an address; Render then fails saying the base is not set.
func httpBaseFor(listen string, local netip.Addr) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return ""
	}
	if ip, err := netip.ParseAddr(host); err == nil && !ip.IsUnspecified() {
		ip = ip.Unmap()
		if !ip.IsLoopback() || !local.IsValid() || local.IsLoopback() {
			return "http://" + net.JoinHostPort(ip.WithZone("").String(), port)
		}
	} else if err != nil && host != "" && host != "localhost" {
		return "http://" + listen
	}
	if !local.IsValid() || local.IsUnspecified() {
		return ""
	}
	// A zone (fe80::1%eth0) means nothing to the client, and a URL would
	// need it escaped.
	return "http://" + net.JoinHostPort(local.Unmap().WithZone("").String(), port)
}

// bootRenderer renders configs for files.Overlay, pointing them at the
// base bootBase finds for each request.
type bootRenderer struct {
	src  bootconf.Source
	base *bootBase
	// force answers some per-MAC requests with the default config
	// (boot.default_first; nil: never).
	force *defaultFirst
}

func (r bootRenderer) Render(ctx context.Context, name string) ([]byte, bool, error) {
	req, err := bootconf.ParsePath(name)
	switch {
	case errors.Is(err, bootconf.ErrNotConfig):
		return nil, false, nil
	case err != nil:
		return nil, false, &files.Error{Name: name, Kind: files.ErrRefused, Reason: err.Error()}
	}
	src := r.src
	if r.force.take(req.MAC) {
		src = unknownMachines{src}
	}
	out, err := bootconf.Render(ctx, src, req, bootconf.Bases{HTTP: r.base.forRequest(ctx)})
	if err != nil {
		return nil, false, err
	}
	return out, true, nil
}

// newBootFiles opens the boot file tree (creating it) and the overlay of
// rendered configs over it.
func (a *Agent) newBootFiles(cfg Config) (files.Source, error) {
	dir := filepath.Join(cfg.StateDir, "boot")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create boot tree %s: %w", dir, err)
	}
	tree, err := files.NewTree(dir)
	if err != nil {
		return nil, err
	}
	a.bootTree = tree
	a.bootBase = newBootBase(cfg)
	return files.NewOverlay(bootRenderer{src: bootSource{a.store}, base: a.bootBase, force: newDefaultFirst(cfg.Boot.DefaultFirst)}, a.blobSource(tree)), nil
}

// newTFTP builds the TFTP server when tftp.listen is set.
func (a *Agent) newTFTP(cfg Config, src files.Source) (*tftp.Server, error) {
	if cfg.TFTP.Listen == "" {
		return nil, nil
	}
	return tftp.New(tftp.Config{Listen: cfg.TFTP.Listen, MaxTransfers: cfg.TFTP.MaxTransfers},
		src, a.log.With("service", "tftp"), a.metrics.reg)
}

// serveBoot is the HTTP boot route: the configs it renders point at the
// address the client used to reach rackd.
func (a *Agent) serveBoot(w http.ResponseWriter, r *http.Request, _ store.Actor) {
	ctx := r.Context()
	if r.Host != "" {
		ctx = context.WithValue(ctx, baseKey{}, "http://"+r.Host)
	} else if la, ok := ctx.Value(http.LocalAddrContextKey).(net.Addr); ok {
		// HTTP/1.0 without Host: the address the connection came to.
		if ap, err := netip.ParseAddrPort(la.String()); err == nil {
			ctx = files.WithLocalAddr(ctx, ap.Addr())
		}
	}
	a.bootHTTP.ServeHTTP(w, r.WithContext(ctx))
}

func newBootHTTP(src files.Source, a *Agent) *httpboot.Handler {
	return httpboot.New(src, a.log.With("service", "httpboot"), a.metrics.reg)
}
