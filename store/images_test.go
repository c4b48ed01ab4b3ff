package store_test

import (
	"context"
	"strings"
	"testing"

	"rackd/store"
	"rackd/store/storetest"
)

func sha(c byte) string { return strings.Repeat(string(c), 64) }

func testImage(name, arch, purpose string, shas ...string) store.Image {
	im := store.Image{Name: name, Arch: arch, Purpose: purpose}
	for i, h := range shas {
		role := "initrd"
		if i == 0 {
			role = "kernel"
		}
		im.Files = append(im.Files, store.ImageFile{Path: "f" + string(rune('0'+i)), Role: role, SHA256: h, Size: int64(i)})
	}
	return im
}

func withCmdline(im store.Image, c string) store.Image { im.Cmdline = c; return im }

func withChunks(im store.Image, h string) store.Image { im.Files[0].Chunks = h; return im }

// diskImage is a deploy image of one disk file of that format and raw size
// and digest.
func diskImage(format string, rawSize int64, rawSHA string) store.Image {
	return store.Image{Name: "disk", Arch: "amd64", Purpose: "deploy", Files: []store.ImageFile{
		{Path: "disk.img", Role: "disk", SHA256: sha('a'), Size: 10, Format: format, RawSize: rawSize, RawSHA256: rawSHA}}}
}

func TestPutImageValidation(t *testing.T) {
	tests := map[string]struct {
		actor store.Actor
		im    store.Image
		code  store.Code
	}{
		"ok":               {admin, testImage("ubuntu-24.04", "amd64", "deploy", sha('a')), ""},
		"system":           {store.System, testImage("enlist", "arm64", "enlist", sha('a'), sha('b')), ""},
		"non-admin":        {alice, testImage("x", "amd64", "deploy", sha('a')), store.CodeForbidden},
		"empty name":       {admin, testImage("", "amd64", "deploy", sha('a')), store.CodeInvalid},
		"dot name":         {admin, testImage(".x", "amd64", "deploy", sha('a')), store.CodeInvalid},
		"slash name":       {admin, testImage("a/b", "amd64", "deploy", sha('a')), store.CodeInvalid},
		"slash arch":       {admin, testImage("a", "amd/64", "deploy", sha('a')), store.CodeInvalid},
		"bad purpose":      {admin, testImage("a", "amd64", "rescue", sha('a')), store.CodeInvalid},
		"no files":         {admin, testImage("a", "amd64", "deploy"), store.CodeInvalid},
		"bad sha":          {admin, testImage("a", "amd64", "deploy", "abc"), store.CodeInvalid},
		"upper sha":        {admin, testImage("a", "amd64", "deploy", sha('A')), store.CodeInvalid},
		"too long name":    {admin, testImage(strings.Repeat("n", 65), "amd64", "deploy", sha('a')), store.CodeInvalid},
		"bootloader":       {admin, testImage("bootloaders", "arm64", "bootloader", sha('a')), ""},
		"cmdline":          {admin, withCmdline(testImage("a", "amd64", "deploy", sha('a')), "console=ttyS0 -- single"), ""},
		"cmdline newline":  {admin, withCmdline(testImage("a", "amd64", "deploy", sha('a')), "quiet\nLABEL x"), store.CodeInvalid},
		"cmdline too long": {admin, withCmdline(testImage("a", "amd64", "deploy", sha('a')), strings.Repeat("a", 1025)), store.CodeInvalid},
		"disk of old":      {admin, diskImage("", 0, ""), ""},
		"raw disk":         {admin, diskImage("raw", 10, sha('a')), ""},
		"zstd disk":        {admin, diskImage("zstd", 1<<30, sha('b')), ""},
		"xz disk, no sha":  {admin, diskImage("xz", 1<<30, ""), ""},
		"gzip, no size":    {admin, diskImage("gzip", 0, sha('b')), store.CodeInvalid},
		"qcow2 disk":       {admin, diskImage("qcow2", 1<<30, sha('b')), store.CodeInvalid},
		"negative raw":     {admin, diskImage("raw", -1, ""), store.CodeInvalid},
		"bad raw sha":      {admin, diskImage("zstd", 5, "abc"), store.CodeInvalid},
		"chunk list":       {admin, withChunks(diskImage("zstd", 5, sha('b')), sha('c')), ""},
		"bad chunk list":   {admin, withChunks(diskImage("raw", 5, ""), "abc"), store.CodeInvalid},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := storetest.New(t)
			got, err := s.PutImage(context.Background(), tc.actor, tc.im)
			if code := store.CodeOf(err); code != tc.code || (tc.code == "" && err != nil) {
				t.Fatalf("PutImage: %v (code %q), want code %q", err, code, tc.code)
			}
			ims, err := s.Images()
			if err != nil {
				t.Fatal(err)
			}
			if tc.code != "" {
				if len(ims) != 0 {
					t.Fatalf("refused image was stored: %+v", ims)
				}
				return
			}
			if got.Created.IsZero() || len(ims) != 1 || ims[0].Name != tc.im.Name || len(ims[0].Files) != len(tc.im.Files) || ims[0].Cmdline != tc.im.Cmdline {
				t.Fatalf("stored %+v, returned %+v", ims, got)
			}
			if ims[0].Files[0] != tc.im.Files[0] {
				t.Fatalf("stored file %+v, want %+v", ims[0].Files[0], tc.im.Files[0])
			}
		})
	}
}

func TestImagesRegistry(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	put := func(im store.Image) {
		t.Helper()
		if _, err := s.PutImage(ctx, admin, im); err != nil {
			t.Fatal(err)
		}
	}
	put(testImage("ubuntu", "arm64", "deploy", sha('a'), sha('b')))
	put(testImage("ubuntu", "amd64", "deploy", sha('a'), sha('c')))
	put(testImage("enlist", "amd64", "enlist", sha('d')))
	// A disk file's chunk list is a blob of the image too.
	put(store.Image{Name: "disk", Arch: "amd64", Purpose: "deploy", Files: []store.ImageFile{
		{Path: "disk.img", Role: "disk", SHA256: sha('8'), Size: 10, Format: "raw", RawSize: 10, RawSHA256: sha('8'), Chunks: sha('9')}}})
	// Replacing ubuntu/amd64 drops its reference to c.
	put(testImage("ubuntu", "amd64", "commission", sha('a'), sha('e')))

	ims, err := s.Images()
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, im := range ims {
		keys = append(keys, im.Name+"/"+im.Arch+"/"+im.Purpose)
	}
	if got, want := strings.Join(keys, " "), "disk/amd64/deploy enlist/amd64/enlist ubuntu/amd64/commission ubuntu/arm64/deploy"; got != want {
		t.Fatalf("Images = %s, want %s", got, want)
	}

	inUse := map[string]bool{sha('a'): true, sha('b'): true, sha('c'): false, sha('d'): true, sha('e'): true, sha('f'): false, sha('8'): true, sha('9'): true}
	for h, want := range inUse {
		if got := s.ImageBlobInUse(h); got != want {
			t.Errorf("ImageBlobInUse(%c…) = %t, want %t", h[0], got, want)
		}
	}

	tests := []struct {
		name       string
		actor      store.Actor
		img, arch  string
		code       store.Code
		stillInUse []string
		nowUnused  []string
	}{
		{"non-admin", alice, "ubuntu", "arm64", store.CodeForbidden, []string{sha('b')}, nil},
		{"missing", admin, "ubuntu", "riscv64", store.CodeNotFound, nil, nil},
		{"arm64", admin, "ubuntu", "arm64", "", []string{sha('a')}, []string{sha('b')}},
		{"again", admin, "ubuntu", "arm64", store.CodeNotFound, nil, nil},
		{"amd64", admin, "ubuntu", "amd64", "", []string{sha('d')}, []string{sha('a'), sha('e')}},
	}
	for _, tc := range tests {
		im, err := s.DeleteImage(ctx, tc.actor, tc.img, tc.arch)
		if code := store.CodeOf(err); code != tc.code || (tc.code == "" && err != nil) {
			t.Fatalf("%s: DeleteImage: %v (code %q), want %q", tc.name, err, code, tc.code)
		}
		if tc.code == "" && (im.Name != tc.img || im.Arch != tc.arch) {
			t.Errorf("%s: returned %+v", tc.name, im)
		}
		for _, h := range tc.stillInUse {
			if !s.ImageBlobInUse(h) {
				t.Errorf("%s: %c… no longer in use", tc.name, h[0])
			}
		}
		for _, h := range tc.nowUnused {
			if s.ImageBlobInUse(h) {
				t.Errorf("%s: %c… still in use", tc.name, h[0])
			}
		}
	}
}

// A deploy names what it installs: an image of that name imported for the
// machine's arch, of purpose deploy, checked in the deploy's transaction.
// Anything else is refused naming the deploy images that are imported for
// the arch (an image not imported used to send the machine to DEPLOYING,
// where it waited for the watchdog).
func TestDeployImagePurpose(t *testing.T) {
	tests := map[string]struct {
		images []store.Image
		actor  store.Actor // who deploys; the owner when zero
		image  string
		code   store.Code
		msg    string
	}{
		"deploy image": {images: []store.Image{testImage("jammy", "amd64", store.PurposeDeploy, sha('a'))}, image: "jammy"},
		"commission image": {images: []store.Image{testImage("jammy", "amd64", store.PurposeCommission, sha('a'))}, image: "jammy",
			code: store.CodeInvalid, msg: "image jammy/amd64 has purpose commission, not deploy"},
		"bootloader image": {images: []store.Image{testImage("loaders", "amd64", store.PurposeBootloader, sha('a'))}, image: "loaders",
			code: store.CodeInvalid, msg: "image loaders/amd64 has purpose bootloader, not deploy"},
		"another arch's image of that name": {images: []store.Image{testImage("jammy", "arm64", store.PurposeDeploy, sha('a')),
			testImage("noble", "amd64", store.PurposeDeploy, sha('b'))}, image: "jammy",
			code: store.CodeInvalid, msg: "machine web1: image jammy is not imported for amd64 (deploy images imported for amd64: noble)"},
		"deploy image beside a commission image of another arch": {images: []store.Image{
			testImage("jammy", "amd64", store.PurposeDeploy, sha('a')), testImage("jammy", "arm64", store.PurposeEnlist, sha('b'))}, image: "jammy"},
		"not imported": {images: []store.Image{testImage("jammy", "amd64", store.PurposeDeploy, sha('a')),
			testImage("bookworm", "amd64", store.PurposeDeploy, sha('b')), testImage("enlist", "amd64", store.PurposeEnlist, sha('c'))},
			image: "nosuch", code: store.CodeInvalid,
			msg: "machine web1: image nosuch is not imported for amd64 (deploy images imported for amd64: bookworm, jammy)"},
		"nothing imported": {image: "noble", code: store.CodeInvalid,
			msg: "machine web1: image noble is not imported for amd64 (no deploy image is imported for amd64: import one with rackd images import)"},
		"no image named": {images: []store.Image{testImage("jammy", "amd64", store.PurposeDeploy, sha('a'))}, code: store.CodeInvalid,
			msg: "machine web1: a deploy needs an image (deploy images imported for amd64: jammy)"},
		// Who may deploy is decided before what.
		"a stranger with a commission image": {images: []store.Image{testImage("jammy", "amd64", store.PurposeCommission, sha('a'))},
			actor: bob, image: "jammy", code: store.CodeForbidden},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := storetest.New(t)
			for _, im := range tc.images {
				if _, err := s.PutImage(t.Context(), admin, im); err != nil {
					t.Fatal(err)
				}
			}
			ready(t, s, "web1")
			allocate(t, s, alice, "web1", "juju")
			actor := tc.actor
			if actor.Name == "" {
				actor = alice
			}
			before := snap(t, s)
			m, err := s.Transition(t.Context(), actor, store.TransitionRequest{Machine: "web1", Action: store.ActionDeploy, Image: tc.image})
			if tc.code != "" {
				wantCode(t, err, tc.code)
				if tc.msg != "" && err.Error() != tc.msg {
					t.Errorf("refusal %q, want %q", err, tc.msg)
				}
				before.mustEqual(t, snap(t, s))
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.State != store.StateDeploying || m.DeployImage != tc.image {
				t.Errorf("deployed: %s with image %q; want DEPLOYING with %q", m.State, m.DeployImage, tc.image)
			}
		})
	}
}
