package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"

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
	return bootconf.MachineInfo{ID: m.ID, Hostname: m.Hostname, State: string(m.State), Arch: m.Arch, Image: m.DeployImage,
		Token: b.s.PhaseToken(m), Erase: m.Erase}, true, nil
}

type baseKey struct{}

// bootRenderer renders configs for files.Overlay. The HTTP base the configs
// point at comes from the request (HTTP) or the configuration (TFTP).
type bootRenderer struct {
	src  bootconf.Source
	base string // used when the request carries none
	// force answers some per-MAC requests with the default config
	// (boot.default_first; nil: never).
	force *defaultFirst
}

func (r bootRenderer) Render(ctx context.Context, name string) ([]byte, bool, error) {
	var req bootconf.Request
	var err error
	if q, ok := strings.CutPrefix(name, "ipxe?"); ok {
		var v url.Values
		if v, err = url.ParseQuery(q); err == nil {
			req, err = bootconf.ParseIPXEQuery(v)
		}
	} else {
		req, err = bootconf.ParsePath(name)
	}
	switch {
	case errors.Is(err, bootconf.ErrNotConfig):
		return nil, false, nil
	case err != nil:
		return nil, false, &files.Error{Name: name, Kind: files.ErrRefused, Reason: err.Error()}
	}
	base := r.base
	if b, ok := ctx.Value(baseKey{}).(string); ok && b != "" {
		base = b
	}
	src := r.src
	if r.force.take(req.MAC) {
		src = unknownMachines{src}
	}
	out, err := bootconf.Render(ctx, src, req, bootconf.Bases{HTTP: base})
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
	base := cfg.DHCP.HTTPURL
	if base == "" && cfg.TFTP.Listen != "" {
		if host, _, err := net.SplitHostPort(cfg.TFTP.Listen); err == nil && host != "" && host != "0.0.0.0" {
			if _, port, err := net.SplitHostPort(cfg.Listen); err == nil {
				base = "http://" + net.JoinHostPort(host, port)
			}
		}
	}
	return files.NewOverlay(bootRenderer{src: bootSource{a.store}, base: base, force: newDefaultFirst(cfg.Boot.DefaultFirst)}, blobSource{blobs: a.images, loaders: &a.bootloaders, next: tree}), nil
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
	ctx := context.WithValue(r.Context(), baseKey{}, "http://"+r.Host)
	a.bootHTTP.ServeHTTP(w, r.WithContext(ctx))
}

func newBootHTTP(src files.Source, a *Agent) *httpboot.Handler {
	return httpboot.New(src, a.log.With("service", "httpboot"), a.metrics.reg)
}
