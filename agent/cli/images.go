package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"

	"rackd/agent/api"
	"rackd/agent/client"
)

// This file holds the images verbs.

func imagesGroup() *group {
	g := &group{name: "images", summary: "Import, list and remove boot images."}
	g.verbs = []*verb{imagesListVerb(), imagesImportVerb(), imagesRmVerb()}
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
		name:    "import",
		args:    []string{"DIR"},
		summary: "import an image directory on the rackd host (admin)",
		help: `DIR holds rackd-image.json and the files it lists. The rackd server reads
DIR, not this command: it must be a directory on the rackd host, readable by
rackd (a relative DIR is made absolute here first). Every file's size and
sha256 are checked; on any mismatch nothing is imported and nothing is left
behind. An image of the same name and arch is replaced.`,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			return func(e *env, args []string) error {
				dir, err := filepath.Abs(args[0])
				if err != nil {
					return usagef("DIR %q: %v", args[0], err)
				}
				return callAndPrint(e, func(ctx context.Context, c *client.Client) (api.Image, error) {
					return c.ImportImage(ctx, dir)
				}, func(w io.Writer, im api.Image) error { return printImages(w, []api.Image{im}) })
			}
		},
	}
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
	fmt.Fprintln(tw, "NAME\tARCH\tPURPOSE\tFILES\tSIZE\tCREATED")
	for _, im := range ims {
		var size int64
		for _, f := range im.Files {
			size += f.Size
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", cell(im.Name), cell(im.Arch), cell(im.Purpose), len(im.Files), size, when(im.Created))
	}
	return tw.Flush()
}
