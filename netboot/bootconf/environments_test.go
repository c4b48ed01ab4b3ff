package bootconf

import (
	"reflect"
	"testing"
)

func TestEnvironmentsOf(t *testing.T) {
	file := func(role, name string) ImageFile {
		return ImageFile{Role: role, Path: "images/" + name, SHA256: name, Size: int64(len(name))}
	}
	image := func(name, arch, purpose, cmdline string, files ...ImageFile) Image {
		return Image{Name: name, Arch: arch, Purpose: purpose, Cmdline: cmdline, Files: files}
	}
	enlist := image("rackd", "amd64", PurposeEnlist, "console=ttyS0",
		file(RoleKernel, "ek"), file(RoleInitrd, "ei"))
	enlistEnv := Environment{Kernel: "images/ek", Initrds: []string{"images/ei"}, Args: []string{"console=ttyS0"}}
	commission := image("comm", "amd64", PurposeCommission, "",
		file(RoleKernel, "ck"), file(RoleInitrd, "ucode"), file(RoleInitrd, "ci"))
	commissionEnv := Environment{Kernel: "images/ck", Initrds: []string{"images/ucode", "images/ci"}, Args: []string{}}
	jammy := image("jammy", "amd64", PurposeDeploy, "quiet -- single", file(RoleKernel, "jk"), file(RoleInitrd, "ji"))
	jammyEnv := Environment{Kernel: "images/jk", Initrds: []string{"images/ji"}, Args: []string{"quiet", "--", "single"}}
	disk := image("disk", "amd64", PurposeDeploy, "", file(RoleDisk, "raw"))
	rawDisk := &DiskImage{Path: "images/raw", SHA256: "raw", Size: 3}

	tests := map[string]struct {
		ims  []Image
		arch string
		want Environments
	}{
		"nothing imported": {arch: "amd64"},
		"the enlist image serves commissioning too": {ims: []Image{enlist}, arch: "amd64",
			want: Environments{Enlist: enlistEnv, Commission: enlistEnv}},
		"a commission image of its own": {ims: []Image{commission, enlist}, arch: "amd64",
			want: Environments{Enlist: enlistEnv, Commission: commissionEnv}},
		"a commission image without a kernel does not count": {arch: "amd64",
			ims:  []Image{enlist, image("half", "amd64", PurposeCommission, "", file(RoleInitrd, "hi"))},
			want: Environments{Enlist: enlistEnv, Commission: enlistEnv}},
		"another arch's images are not this arch's": {ims: []Image{enlist, commission, jammy, disk}, arch: "arm64"},
		"a deploy image with a kernel boots itself": {ims: []Image{enlist, jammy}, arch: "amd64",
			want: Environments{Enlist: enlistEnv, Commission: enlistEnv, Deploy: map[string]Environment{"jammy": jammyEnv}}},
		"a raw disk image is written by the commissioning environment": {ims: []Image{commission, disk, enlist}, arch: "amd64",
			want: Environments{Enlist: enlistEnv, Commission: commissionEnv, Deploy: map[string]Environment{
				"disk": {Kernel: commissionEnv.Kernel, Initrds: commissionEnv.Initrds, Args: commissionEnv.Args, Disk: rawDisk}}}},
		"a raw disk image without any environment to write it": {ims: []Image{disk}, arch: "amd64",
			want: Environments{Deploy: map[string]Environment{"disk": {Disk: rawDisk}}}},
		"a deploy image with a kernel and a disk keeps both": {arch: "amd64",
			ims:  []Image{image("both", "amd64", PurposeDeploy, "", file(RoleKernel, "bk"), file(RoleDisk, "raw"))},
			want: Environments{Deploy: map[string]Environment{"both": {Kernel: "images/bk", Args: []string{}, Disk: rawDisk}}}},
		"the first kernel, every initrd in order": {arch: "amd64",
			ims: []Image{image("rackd", "amd64", PurposeEnlist, "",
				file(RoleKernel, "k1"), file(RoleInitrd, "i1"), file(RoleKernel, "k2"), file(RoleInitrd, "i2"), file("image", "x"))},
			want: Environments{
				Enlist:     Environment{Kernel: "images/k1", Initrds: []string{"images/i1", "images/i2"}, Args: []string{}},
				Commission: Environment{Kernel: "images/k1", Initrds: []string{"images/i1", "images/i2"}, Args: []string{}}}},
		"bootloaders serve no environment": {arch: "amd64",
			ims: []Image{image("loaders", "amd64", "bootloader", "", file("bootloader", "pxelinux.0"))}},
		"of two images of one purpose the last wins": {arch: "amd64",
			ims: []Image{enlist, image("rackd2", "amd64", PurposeEnlist, "", file(RoleKernel, "k2"))},
			want: Environments{Enlist: Environment{Kernel: "images/k2", Args: []string{}},
				Commission: Environment{Kernel: "images/k2", Args: []string{}}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := EnvironmentsOf(tc.ims, tc.arch)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("EnvironmentsOf =\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}

// A raw disk's deploy environment is a copy of the commissioning one:
// changing one leaves the other alone.
func TestEnvironmentsOfDiskCopies(t *testing.T) {
	env := EnvironmentsOf([]Image{
		{Name: "rackd", Arch: "amd64", Purpose: PurposeEnlist, Cmdline: "a b",
			Files: []ImageFile{{Role: RoleKernel, Path: "k"}, {Role: RoleInitrd, Path: "i"}}},
		{Name: "disk", Arch: "amd64", Purpose: PurposeDeploy, Files: []ImageFile{{Role: RoleDisk, Path: "d"}}},
	}, "amd64")
	d := env.Deploy["disk"]
	d.Initrds[0], d.Args[0] = "changed", "changed"
	if env.Commission.Initrds[0] != "i" || env.Commission.Args[0] != "a" || env.Commission.Disk != nil {
		t.Errorf("the commissioning environment changed with the disk's: %+v", env.Commission)
	}
}
