package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"rackd/agent/api"
	"rackd/images"
	"rackd/netboot/bootconf"
	"rackd/netboot/files"
	"rackd/store"
)

// Images: the blob store at <state dir>/images holds the artefacts, the
// store's registry says which images exist. Boot configs name kernels and
// initrds images/<sha256>, which the boot file tree serves from the blobs.

// imagePrefix is the boot file name prefix of blobs.
const imagePrefix = "images/"

func imageView(im store.Image) api.Image {
	out := api.Image{Name: im.Name, Arch: im.Arch, Purpose: im.Purpose, Created: im.Created,
		Files: make([]api.ImageFile, len(im.Files))}
	for i, f := range im.Files {
		out.Files[i] = api.ImageFile{Path: f.Path, Role: f.Role, SHA256: f.SHA256, Size: f.Size}
	}
	return out
}

func (a *Agent) listImages(w http.ResponseWriter, r *http.Request, _ store.Actor) {
	ims, err := a.store.Images()
	if err != nil {
		a.internalError(w, r, err)
		return
	}
	out := make([]api.Image, len(ims))
	for i, im := range ims {
		out[i] = imageView(im)
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *Agent) importImage(w http.ResponseWriter, r *http.Request, who store.Actor) {
	var req api.ImportImage
	if a.decodeBody(w, r, &req, false) != nil {
		return
	}
	if req.Dir == "" || !filepath.IsAbs(req.Dir) {
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, fmt.Sprintf("dir %q: want an absolute path on the rackd host", req.Dir))
		return
	}
	// One import or delete at a time: a delete's "is this blob still used"
	// check must not race an import that is about to record it.
	a.imagesMu.Lock()
	defer a.imagesMu.Unlock()
	m, blobs, err := images.ImportDir(r.Context(), a.images, req.Dir, images.ImportOptions{InUse: a.store.ImageBlobInUse})
	if err != nil {
		if r.Context().Err() != nil {
			return
		}
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, err.Error())
		return
	}
	im := store.Image{Name: m.Name, Arch: m.Arch, Purpose: m.Purpose}
	for i, f := range m.Files {
		im.Files = append(im.Files, store.ImageFile{Path: f.Path, Role: f.Role, SHA256: blobs[i].SHA256, Size: blobs[i].Size})
	}
	saved, err := a.store.PutImage(r.Context(), who, im)
	if err != nil {
		a.removeUnusedBlobs(im.Files)
		a.storeError(w, r, err)
		return
	}
	a.log.Info("image imported", "image", saved.Name, "arch", saved.Arch, "purpose", saved.Purpose, "by", who.Name)
	writeJSON(w, http.StatusCreated, imageView(saved))
}

func (a *Agent) deleteImage(w http.ResponseWriter, r *http.Request, who store.Actor) {
	a.imagesMu.Lock()
	defer a.imagesMu.Unlock()
	im, err := a.store.DeleteImage(r.Context(), who, r.PathValue("name"), r.PathValue("arch"))
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	a.removeUnusedBlobs(im.Files)
	a.log.Info("image deleted", "image", im.Name, "arch", im.Arch, "by", who.Name)
	writeJSON(w, http.StatusOK, imageView(im))
}

// removeUnusedBlobs removes the blobs of fs that no recorded image uses.
// Failures are logged: a leftover blob wastes space but breaks nothing.
func (a *Agent) removeUnusedBlobs(fs []store.ImageFile) {
	for _, f := range fs {
		if a.store.ImageBlobInUse(f.SHA256) {
			continue
		}
		if err := a.images.Remove(f.SHA256); err != nil && !errors.Is(err, images.ErrNotFound) {
			a.log.Warn("remove image blob", "sha256", f.SHA256, "err", err)
		}
	}
}

// Environments returns the registry's images for arch: the enlist and
// commission environments, and the deploy images by name.
func (b bootSource) Environments(ctx context.Context, arch string) (bootconf.Environments, error) {
	ims, err := b.s.Images()
	if err != nil {
		return bootconf.Environments{}, err
	}
	var env bootconf.Environments
	for _, im := range ims {
		if im.Arch != arch {
			continue
		}
		var e bootconf.Environment
		for _, f := range im.Files {
			switch f.Role {
			case images.RoleKernel:
				if e.Kernel == "" {
					e.Kernel = imagePrefix + f.SHA256
				}
			case images.RoleInitrd:
				e.Initrds = append(e.Initrds, imagePrefix+f.SHA256)
			}
		}
		switch im.Purpose {
		case store.PurposeEnlist:
			env.Enlist = e
		case store.PurposeCommission:
			env.Commission = e
		case store.PurposeDeploy:
			if env.Deploy == nil {
				env.Deploy = map[string]bootconf.Environment{}
			}
			env.Deploy[im.Name] = e
		}
	}
	return env, nil
}

// blobSource serves images/<sha256> from the blob store and everything else
// from next.
type blobSource struct {
	blobs *images.Store
	next  files.Source
}

func (s blobSource) Open(ctx context.Context, name string) (files.File, error) {
	p, err := files.Clean(name)
	if err != nil {
		return nil, err
	}
	h, ok := strings.CutPrefix(p, imagePrefix)
	if !ok {
		return s.next.Open(ctx, p)
	}
	if !images.ValidHex(h) {
		return nil, &files.Error{Name: name, Kind: files.ErrNotFound, Reason: "not an image blob"}
	}
	f, b, err := s.blobs.Open(h)
	if errors.Is(err, images.ErrNotFound) {
		return nil, &files.Error{Name: name, Kind: files.ErrNotFound, Reason: "no such image blob"}
	}
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &blobFile{File: f, size: b.Size, mod: fi.ModTime(), sha: h}, nil
}

// blobFile is an open blob. It embeds *os.File, as the tree's files do, so
// the servers can use sendfile. Blobs never change (the name is the
// content's hash), so the digest is a perfect strong ETag.
type blobFile struct {
	*os.File
	size int64
	mod  time.Time
	sha  string
}

func (f *blobFile) Size() int64        { return f.size }
func (f *blobFile) ModTime() time.Time { return f.mod }
func (f *blobFile) ETag() string       { return `"` + f.sha + `"` }
