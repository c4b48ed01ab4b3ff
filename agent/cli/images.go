package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"rackd/agent/client"
	"rackd/api"
)

// This file holds the images verbs.

func imagesGroup() *group {
	g := &group{name: "images", summary: "Import, list and remove boot images."}
	g.verbs = []*verb{imagesListVerb(), imagesImportVerb(), imagesImportsVerb(), imagesRmVerb()}
	for _, v := range g.verbs {
		v.group = g.name
	}
	return g
}

func imagesListVerb() *verb {
	return &verb{
		name:    "list",
		summary: "list the imported boot images",
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			return func(e *env, _ []string) error {
				return callAndPrint(e, func(ctx context.Context, c *client.Client) ([]api.Image, error) {
					return c.ListImages(ctx)
				}, printImages)
			}
		},
	}
}

func imagesImportVerb() *verb {
	return &verb{
		name:     "import",
		args:     []string{"DIR|URL"},
		synopsis: "[--sha256 HEX | --checksums URL] [--name N] [--arch A] [--os OS --series S] [--detach]",
		summary:  "import an image directory on the rackd host, or from an http(s) URL, or a cloud image (admin)",
		help: `DIR holds rackd-image.json and the files it lists. The rackd server reads
DIR, not this command: it must be a directory on the rackd host, readable by
rackd (a relative DIR is made absolute here first).

URL (http:// or https://) names a rackd-image.json, or a directory that holds
one; rackd fetches it and each file it lists, relative to it.

With --sha256 or --checksums, URL is a bare disk image instead, as vendors
publish their cloud images: raw, compressed with gzip, xz or zstd, or qcow2.
--sha256 gives its digest; --checksums the URL of the checksum list the
vendor publishes beside it (SHA256SUMS, SHA512SUMS, or a BSD-style
"SHA256 (name) = hex" list), which rackd fetches and finds the image's file
name in. The download is checked against that digest before anything is
registered. The image is a deploy image with that one disk file, which the
commissioning environment writes; it is named --name (default: the file
name without its .img/.raw/.qcow2/.gz/.xz/.zst extensions) for --arch
(default amd64).

A compressed disk image is kept compressed (the deploy environment
decompresses it while it writes); rackd decompresses it once, while it
downloads, to learn and check its raw size and digest. A qcow2 is converted with qemu-img
(Debian's qemu-utils, on the rackd host) and stored as zstd; one with a
backing file is refused.

Every file's size and sha256 are checked while it is written; on any
mismatch, HTTP error, truncated download or cancel nothing is imported and
nothing is left behind. An image of the same name and arch is replaced.

--os and --series name a deploy image as MAAS's clients ask for one
(osystem and distro_series: "ubuntu" and "noble"), over what its manifest
says; without either, rackd reads them from the image's name (a cloud
image's: "noble-server-cloudimg-amd64" is ubuntu/noble), else the image is
MAAS's "custom" os with its name for series.

The import runs on the server as a job; this command follows it, with a
progress bar on a terminal and a progress line every 2 s otherwise, and
prints the image when it is done. Ctrl-C cancels the import. With
--detach it prints the job and returns at once (follow it with
'rackd images imports ID').`,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			detach := fs.Bool("detach", false, "start the import and print its job without waiting")
			sha := fs.String("sha256", "", "the cloud image's SHA-256, as its vendor publishes it")
			sums := fs.String("checksums", "", "the `URL` of the vendor's SHA256SUMS or SHA512SUMS that names the cloud image")
			name := fs.String("name", "", "the cloud image's name (default: from its file name)")
			arch := fs.String("arch", "", "the cloud image's architecture (default amd64)")
			osName := fs.String("os", "", "a deploy image's `OS` for MAAS's API (osystem: ubuntu, debian, custom)")
			series := fs.String("series", "", "a deploy image's `SERIES` for MAAS's API (distro_series: noble, bookworm)")
			return func(e *env, args []string) error {
				req := api.ImportImage{SHA256: *sha, Checksums: *sums, Name: *name, Arch: *arch, OS: *osName, Series: *series}
				cloud := *sha != "" || *sums != ""
				switch {
				case *sha != "" && *sums != "":
					return usagef("--sha256 and --checksums: give one")
				case !cloud && (*name != "" || *arch != ""):
					return usagef("--name and --arch name a cloud image: give --sha256 or --checksums with its URL")
				}
				if strings.HasPrefix(args[0], "http://") || strings.HasPrefix(args[0], "https://") {
					req.URL = args[0]
				} else if cloud {
					return usagef("%q: a cloud image is imported from an http:// or https:// URL", args[0])
				} else if strings.Contains(args[0], "://") {
					return usagef("%q: want a directory or an http:// or https:// URL", args[0])
				} else {
					dir, err := filepath.Abs(args[0])
					if err != nil {
						return usagef("DIR %q: %v", args[0], err)
					}
					req.Dir = dir
				}
				if *detach {
					return callAndPrint(e, func(ctx context.Context, c *client.Client) (api.ImportJob, error) {
						return c.StartImport(ctx, req)
					}, func(w io.Writer, j api.ImportJob) error { return printImports(w, []api.ImportJob{j}) })
				}
				return followImport(e, req)
			}
		},
	}
}

// importPoll is how often followImport asks for the job's progress.
var importPoll = 250 * time.Millisecond

// followImport starts the import and follows it to its end, drawing its
// progress on stderr. A cancelled command (Ctrl-C) cancels the import.
func followImport(e *env, req api.ImportImage) error {
	c, err := e.client()
	if err != nil {
		return err
	}
	// Each answer is captured so --json prints the server's own image
	// JSON, unknown fields and all.
	ctx, raw := e.capture()
	j, err := c.StartImport(ctx, req)
	if err != nil {
		return err
	}
	p := newProgress(e.stderr)
	for j.State == api.ImportRunning {
		p.update(j)
		select {
		case <-time.After(importPoll):
		case <-e.ctx.Done():
			// The command's context is gone: cancel with a fresh one,
			// bounded, so the server stops and cleans up.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(e.ctx), 30*time.Second)
			defer cancel()
			if cj, cerr := c.CancelImport(ctx, j.ID); cerr == nil {
				j = cj
				p.done(j)
			}
			return fmt.Errorf("import %s cancelled: %w", j.ID, e.ctx.Err())
		}
		if j, err = c.ImportJob(ctx, j.ID); err != nil {
			if e.ctx.Err() != nil {
				continue // the select above cancels the import
			}
			return fmt.Errorf("following import: %w", err)
		}
	}
	p.done(j)
	if j.State != api.ImportDone || j.Image == nil {
		return fmt.Errorf("import %s %s: %s", j.ID, j.State, j.Error)
	}
	if e.json() {
		var last struct {
			Image json.RawMessage `json:"image"`
		}
		if err := json.Unmarshal(*raw, &last); err != nil {
			return fmt.Errorf("printing the answer: %w", err)
		}
		return printJSON(e.stdout, last.Image)
	}
	return printImages(e.stdout, []api.Image{*j.Image})
}

func imagesImportsVerb() *verb {
	return &verb{
		name:    "imports",
		optArgs: []string{"ID"},
		summary: "list the running and recent imports, or show one (admin)",
		help: `Without ID, lists the imports this rackd ran since it started (the last 32
finished ones and every running one); with ID, shows that import's progress.`,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			return func(e *env, args []string) error {
				if len(args) == 1 {
					return callAndPrint(e, func(ctx context.Context, c *client.Client) (api.ImportJob, error) {
						return c.ImportJob(ctx, args[0])
					}, func(w io.Writer, j api.ImportJob) error { return printImports(w, []api.ImportJob{j}) })
				}
				return callAndPrint(e, func(ctx context.Context, c *client.Client) ([]api.ImportJob, error) {
					return c.ImportJobs(ctx)
				}, printImports)
			}
		},
	}
}

func printImports(w io.Writer, js []api.ImportJob) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "ID\tSTATE\tDONE\tBYTES\tFILES\tSOURCE\tSTARTED\tERROR")
	for _, j := range js {
		fmt.Fprintf(tw, "%s\t%s\t%.0f%%\t%d/%d\t%d/%d\t%s\t%s\t%s\n", cell(j.ID), cell(j.State), fraction(j)*100,
			j.BytesDone, j.BytesTotal, j.FilesDone, j.Files, cell(j.Source), when(j.Started), cell(j.Error))
	}
	return tw.Flush()
}

func imagesRmVerb() *verb {
	return &verb{
		name:    "rm",
		args:    []string{"NAME", "ARCH"},
		summary: "remove an image and the files no other image uses (admin)",
		help:    "Same as DELETE /api/v1/images/NAME/ARCH. Prints the image as it was.",
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			return func(e *env, args []string) error {
				return callAndPrint(e, func(ctx context.Context, c *client.Client) (api.Image, error) {
					return c.DeleteImage(ctx, args[0], args[1])
				}, func(w io.Writer, im api.Image) error { return printImages(w, []api.Image{im}) })
			}
		},
	}
}

func printImages(w io.Writer, ims []api.Image) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "NAME\tARCH\tPURPOSE\tFILES\tSIZE\tDISK\tCREATED\tCMDLINE")
	for _, im := range ims {
		var size int64
		disk := ""
		for _, f := range im.Files {
			size += f.Size
			if f.Role == "disk" {
				disk = diskCell(f)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", cell(im.Name), cell(im.Arch), cell(im.Purpose), len(im.Files), size, cell(disk), when(im.Created), cell(im.Cmdline))
	}
	return tw.Flush()
}

// diskCell says what a disk file is: "raw", or its compression and the
// raw size ("zstd:2147483648").
func diskCell(f api.ImageFile) string {
	if f.Format == "" || f.Format == "raw" {
		return "raw"
	}
	return fmt.Sprintf("%s:%d", f.Format, f.RawSize)
}
