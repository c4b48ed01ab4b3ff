package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"rackd/api"
	"rackd/images"
	"rackd/netboot/bootconf"
	"rackd/netboot/files"
	"rackd/store"
)

// Images: the blob store at <state dir>/images holds the artefacts, the
// store's registry says which images exist. Boot configs name kernels and
// initrds images/<sha256>, which the boot file tree serves from the blobs,
// and the files of bootloader images are served under their own names.
// Imports run as jobs (images.Jobs) whose progress the API reports.

// imagePrefix is the boot file name prefix of blobs.
const imagePrefix = "images/"

func imageView(im store.Image) api.Image {
	out := api.Image{Name: im.Name, Arch: im.Arch, Purpose: im.Purpose, Cmdline: im.Cmdline, Created: im.Created,
		Files: make([]api.ImageFile, len(im.Files))}
	if im.Purpose == store.PurposeDeploy {
		out.OS, out.Series = store.ImageOSSeries(im)
	}
	for i, f := range im.Files {
		out.Files[i] = api.ImageFile{Path: f.Path, Role: f.Role, SHA256: f.SHA256, Size: f.Size,
			Format: f.Format, RawSize: f.RawSize, RawSHA256: f.RawSHA256, Chunks: f.Chunks}
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

// importImage starts an import job. In the background it answers 202 with
// the job at once; otherwise it waits for the job and answers as the job
// ends, and a client that goes away cancels it.
func (a *Agent) importImage(w http.ResponseWriter, r *http.Request, who store.Actor) {
	var req api.ImportImage
	if a.decodeBody(w, r, &req, false) != nil {
		return
	}
	var src images.Source
	var err error
	switch {
	case (req.Dir == "") == (req.URL == ""):
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, "want exactly one of dir (a directory on the rackd host) and url (an http or https URL)")
		return
	case req.Dir != "" && !filepath.IsAbs(req.Dir):
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, fmt.Sprintf("dir %q: want an absolute path on the rackd host", req.Dir))
		return
	case (req.Name != "" || req.Arch != "") && req.SHA256 == "" && req.Checksums == "":
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, "name and arch belong to a cloud image URL, given with sha256 or checksums (a manifest names its image)")
		return
	case images.CheckOSSeries(req.OS, req.Series) != nil:
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, images.CheckOSSeries(req.OS, req.Series).Error())
		return
	case req.Dir != "" && (req.SHA256 != "" || req.Checksums != ""):
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, "sha256 and checksums belong to a cloud image URL, not a directory (its manifest lists the digests)")
		return
	case req.Dir != "":
		// Opened here, not in the job, so a missing directory is a
		// plain 400 even in the background.
		src, err = images.OpenDir(req.Dir)
	case req.SHA256 != "" || req.Checksums != "":
		src, err = images.OpenCloudImage(images.CloudImage{URL: req.URL, SHA256: req.SHA256, Checksums: req.Checksums,
			Name: req.Name, Arch: req.Arch, OS: req.OS, Series: req.Series}, images.URLOptions{})
	default:
		src, err = images.OpenURL(req.URL, images.URLOptions{})
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, err.Error())
		return
	}
	j, err := a.imports.Start(src, who.Name, func(ctx context.Context, j *importJob, src images.Source) (api.Image, error) {
		return a.runImport(ctx, j, src, who, req.OS, req.Series)
	})
	if err != nil {
		src.Close()
		writeError(w, http.StatusTooManyRequests, api.CodeUnavailable, err.Error())
		return
	}
	if req.Background {
		w.Header().Set("Location", "/api/v1/images/imports/"+j.ID())
		writeJSON(w, http.StatusAccepted, importView(j.Status()))
		return
	}
	select {
	case <-j.Done():
	case <-r.Context().Done():
		j.Cancel(errClientGone)
		<-j.Done()
		return
	}
	st := j.Status()
	switch {
	case st.State == images.JobDone:
		writeJSON(w, http.StatusCreated, *st.Result)
	case store.CodeOf(st.Err) != "":
		a.storeError(w, r, st.Err)
	default:
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, st.Err.Error())
	}
}

var errClientGone = errors.New("the client went away")

// runImport is an import job's work: stream the files into the blob store,
// then record the image. The blobs stay pinned until the image is
// recorded, so a delete that runs meanwhile cannot remove a blob this
// import is about to reference; only recording (and deleting) holds
// imagesMu, so a long download blocks nobody.
func (a *Agent) runImport(ctx context.Context, j *importJob, src images.Source, who store.Actor, os, series string) (api.Image, error) {
	res, err := images.Import(ctx, a.images, src, images.ImportOptions{
		InUse: a.store.ImageBlobInUse,
		// Refuse before downloading what no boot config could carry.
		Check: func(m *images.Manifest) error {
			if (os != "" || series != "") && m.Purpose != images.PurposeDeploy {
				return fmt.Errorf("os and series name a deploy image, and %s is a %s image", m.Name, m.Purpose)
			}
			return bootconf.CheckArgs(m.Args())
		},
		Progress: j.Progress,
	})
	if err != nil {
		return api.Image{}, err
	}
	defer res.Release()
	m := res.Manifest
	// The request's os and series win over the manifest's.
	im := store.Image{Name: m.Name, Arch: m.Arch, Purpose: m.Purpose, Cmdline: m.Cmdline,
		OS: cmp.Or(os, m.OS), Series: cmp.Or(series, m.Series)}
	for _, f := range res.Files {
		im.Files = append(im.Files, store.ImageFile{Path: f.Path, Role: f.Role, SHA256: f.SHA256, Size: f.Size,
			Format: f.Format, RawSize: f.RawSize, RawSHA256: f.RawSHA256, Chunks: f.Chunks})
	}
	a.imagesMu.Lock()
	defer a.imagesMu.Unlock()
	// A cancel that came in during the download's last bytes still wins.
	if err := ctx.Err(); err != nil {
		res.Release()
		a.removeUnusedBlobs(im.Files)
		return api.Image{}, context.Cause(ctx)
	}
	saved, err := a.store.PutImage(ctx, who, im)
	if err != nil {
		res.Release()
		a.removeUnusedBlobs(im.Files)
		return api.Image{}, err
	}
	a.refreshBootloaders()
	a.log.Info("image imported", "image", saved.Name, "arch", saved.Arch, "purpose", saved.Purpose, "from", src.String(), "by", who.Name)
	for p, from := range res.Converted {
		a.log.Info("image file converted", "image", saved.Name, "arch", saved.Arch, "file", p, "from", from, "to", images.FormatZstd)
	}
	return imageView(saved), nil
}

func (a *Agent) listImports(w http.ResponseWriter, r *http.Request, _ store.Actor) {
	jobs := a.imports.List()
	out := make([]api.ImportJob, len(jobs))
	for i, st := range jobs {
		out[i] = importView(st)
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *Agent) getImport(w http.ResponseWriter, r *http.Request, _ store.Actor) {
	j := a.imports.Get(r.PathValue("id"))
	if j == nil {
		writeError(w, http.StatusNotFound, api.CodeNotFound, fmt.Sprintf("no import %q (jobs are kept in memory until rackd restarts)", r.PathValue("id")))
		return
	}
	writeJSON(w, http.StatusOK, importView(j.Status()))
}

// cancelImport cancels a running import; it answers once the import has
// stopped and removed what it had written. Cancelling a finished import
// changes nothing and returns it as it is.
func (a *Agent) cancelImport(w http.ResponseWriter, r *http.Request, who store.Actor) {
	j := a.imports.Get(r.PathValue("id"))
	if j == nil {
		writeError(w, http.StatusNotFound, api.CodeNotFound, fmt.Sprintf("no import %q", r.PathValue("id")))
		return
	}
	j.Cancel(fmt.Errorf("cancelled by %s", who.Name))
	select {
	case <-j.Done():
	case <-r.Context().Done():
		return
	}
	writeJSON(w, http.StatusOK, importView(j.Status()))
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
	a.refreshBootloaders()
	a.log.Info("image deleted", "image", im.Name, "arch", im.Arch, "by", who.Name)
	writeJSON(w, http.StatusOK, imageView(im))
}

// removeUnusedBlobs removes the blobs of fs (and of their chunk lists)
// that no recorded image uses.
func (a *Agent) removeUnusedBlobs(fs []store.ImageFile) {
	var hs []string
	for _, f := range fs {
		hs = append(hs, f.SHA256, f.Chunks)
	}
	a.removeBlobsNotInUse(hs)
}

// removeBlobsNotInUse removes those of hs that no recorded image names,
// reading the registry once. A blob an import in progress holds is left to
// it; on a failed read of the registry nothing is removed. Failures are
// logged: a leftover blob wastes space but breaks nothing.
func (a *Agent) removeBlobsNotInUse(hs []string) {
	used, err := a.store.ImageBlobsInUse()
	if err != nil {
		a.log.Warn("image blobs: none removed", "err", err)
		return
	}
	for _, h := range hs {
		if h == "" || used[h] {
			continue
		}
		switch err := a.images.Remove(h); {
		case err == nil:
			a.log.Info("image blob removed: no image names it", "sha256", h)
		case errors.Is(err, images.ErrNotFound):
		case errors.Is(err, images.ErrInUse):
			a.log.Debug("image blob kept: an import in progress uses it", "sha256", h)
		default:
			a.log.Warn("remove image blob", "sha256", h, "err", err)
		}
	}
}

// followImages keeps this agent's blobs and bootloader table in step with
// an image registry other agents change too (a store on a shared engine):
// at start and whenever the registry changes, it removes the blobs no
// image names any more (another agent deleted their image, or did while
// this one was down) and rebuilds the bootloader table (another agent
// imported a bootloader). Blobs an image gained elsewhere are fetched
// from a peer when first asked for.
func (a *Agent) followImages(ctx context.Context) {
	for {
		changed := a.store.ImagesChanged()
		a.imagesMu.Lock()
		a.pruneBlobs()
		a.refreshBootloaders()
		a.imagesMu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}

// pruneBlobs removes the blobs no recorded image names (its caller holds
// imagesMu, so no import of this agent is between storing its blobs and
// recording its image).
func (a *Agent) pruneBlobs() {
	blobs, err := a.images.List()
	if err != nil {
		a.log.Warn("image blobs: not pruned", "err", err)
		return
	}
	hs := make([]string, len(blobs))
	for i, b := range blobs {
		hs[i] = b.SHA256
	}
	a.removeBlobsNotInUse(hs)
}

// refreshBootloaders rebuilds the table of bootloader files the boot tree
// serves by name, from the registry. It runs at start and after every
// import and delete (under imagesMu), and when another agent changes
// the registry (followImages), so a TFTP request for pxelinux.0
// costs a map lookup, not a store read.
func (a *Agent) refreshBootloaders() {
	ims, err := a.store.Images()
	if err != nil {
		// Keep the old table: stale bootloaders beat none.
		a.log.Warn("read images for the bootloader table", "err", err)
		return
	}
	t := bootloaderTable(ims)
	a.bootloaders.Store(&t)
}

// bootloaderTable maps each boot-tree name to the blob that serves it: the
// bootloader files of the images of purpose bootloader. ims is in name,
// then arch order, and the first image to name a file wins, so the answer
// does not depend on import order.
func bootloaderTable(ims []store.Image) map[string]string {
	t := map[string]string{}
	for _, im := range ims {
		if im.Purpose != store.PurposeBootloader {
			continue
		}
		for _, f := range im.Files {
			if _, taken := t[f.Path]; !taken && f.Role == images.RoleBootloader {
				t[f.Path] = f.SHA256
			}
		}
	}
	return t
}

// importJobs are the import jobs of this rackd, and importJob one of them;
// a job's result is the image as the API shows it.
type (
	importJobs = images.Jobs[api.Image]
	importJob  = images.Job[api.Image]
)

const (
	// maxRunningImports bounds concurrent imports: each holds a file open
	// and a connection or disk stream.
	maxRunningImports = 4
	// keepImports is how many finished jobs stay listed.
	keepImports = 32
)

func newImportJobs() *importJobs {
	return images.NewJobs[api.Image](maxRunningImports, keepImports)
}

// importView is a job as the API shows it.
func importView(st images.JobStatus[api.Image]) api.ImportJob {
	v := api.ImportJob{ID: st.ID, Source: st.Source, State: string(st.State), File: st.Progress.Path, Step: st.Progress.Step,
		BytesDone: st.Progress.Done, BytesTotal: st.Progress.Total, FilesDone: st.Progress.FilesDone, Files: st.Progress.Files,
		By: st.By, Started: st.Started, Finished: st.Finished, Image: st.Result}
	if st.Err != nil {
		v.Error = st.Err.Error()
	}
	return v
}

// bootloaderNames are the files a bootloader image provides (images/doc.go,
// scripts/bootloaders.sh), with what fetches them.
var bootloaderNames = map[string]string{
	"pxelinux.0": "BIOS PXE", "ldlinux.c32": "BIOS pxelinux",
	"bootx64.efi": "x86-64 UEFI", "grubx64.efi": "x86-64 UEFI shim", "grubaa64.efi": "arm64 UEFI",
	"undionly.kpxe": "iPXE on BIOS", "ipxe.efi": "iPXE on UEFI", "snponly.efi": "iPXE on UEFI",
}

// blobSource serves images/<sha256> from the blob store, the registered
// bootloaders by name (pxelinux.0, bootx64.efi, ...) from the blob store
// too, and everything else from next: the boot tree, where bootloaders
// copied by hand still work when no bootloader image names them.
type blobSource struct {
	blobs *images.Store
	// loaders is the bootloader table (refreshBootloaders); nil or a
	// nil table serves none.
	loaders *atomic.Pointer[map[string]string]
	next    files.Source
	// fetch, when set, brings a blob the store lacks from a peer agent
	// (a cluster's agents share the registry, not the blobs).
	fetch func(ctx context.Context, h string) error
}

func (s blobSource) Open(ctx context.Context, name string) (files.File, error) {
	p, err := files.Clean(name)
	if err != nil {
		return nil, err
	}
	h, ok := strings.CutPrefix(p, imagePrefix)
	if !ok {
		if f, ok, err := s.openLoader(ctx, p); ok {
			return f, err
		}
		f, err := s.next.Open(ctx, p)
		if what, ok := bootloaderNames[p]; ok && errors.Is(err, files.ErrNotFound) {
			// What the operator must do, in the client's error too.
			return nil, &files.Error{Name: name, Kind: files.ErrNotFound,
				Reason: "no bootloader image provides it (" + what + "): make bootloaders, or rackd images import a bootloader image", Err: err}
		}
		return f, err
	}
	if !images.ValidHex(h) {
		return nil, &files.Error{Name: name, Kind: files.ErrNotFound, Reason: "not an image blob"}
	}
	return s.openBlob(ctx, name, h)
}

// openLoader opens the blob of bootloader p, reporting false when no
// bootloader image names p.
func (s blobSource) openLoader(ctx context.Context, p string) (files.File, bool, error) {
	if s.loaders == nil {
		return nil, false, nil
	}
	t := s.loaders.Load()
	if t == nil {
		return nil, false, nil
	}
	h, ok := (*t)[p]
	if !ok {
		return nil, false, nil
	}
	f, err := s.openBlob(ctx, p, h)
	return f, true, err
}

func (s blobSource) openBlob(ctx context.Context, name, h string) (files.File, error) {
	f, b, err := s.blobs.Open(h)
	if errors.Is(err, images.ErrNotFound) && s.fetch != nil {
		if ferr := s.fetch(ctx, h); ferr == nil {
			f, b, err = s.blobs.Open(h)
		} else if !errors.Is(ferr, errNotRegistered) {
			return nil, &files.Error{Name: name, Kind: files.ErrNotFound, Reason: "no such image blob here, and none from a peer agent", Err: ferr}
		}
	}
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
