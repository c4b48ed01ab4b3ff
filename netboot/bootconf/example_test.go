package bootconf_test

import (
	"context"
	"fmt"

	"rackd/netboot/bootconf"
)

// oneMachine is the smallest Source: one deployed machine, no images.
type oneMachine struct{}

func (oneMachine) Machine(_ context.Context, mac string) (bootconf.MachineInfo, bool, error) {
	if mac != "52:54:00:12:34:56" {
		return bootconf.MachineInfo{}, false, nil
	}
	return bootconf.MachineInfo{ID: "m-1", Hostname: "web1", State: "DEPLOYED", Arch: "amd64"}, true, nil
}

func (oneMachine) Environments(context.Context, string) (bootconf.Environments, error) {
	return bootconf.Environments{}, nil
}

// A TFTP or HTTP handler parses the requested path, renders what it names
// and falls back to the file tree on ErrNotConfig.
func ExampleRender() {
	req, err := bootconf.ParsePath("ipxe/52:54:00:12:34:56.ipxe")
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg, err := bootconf.Render(context.Background(), oneMachine{}, req, bootconf.Bases{HTTP: "http://10.0.0.1:5240"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(string(cfg))
	// Output:
	// #!ipxe
	// # rackd: boot web1 (machine m-1, DEPLOYED) from local disk
	// exit
}

func ExampleParsePath() {
	for _, p := range []string{
		"boot/grub/grub.cfg-01-52-54-00-12-34-56",
		"pxelinux.cfg/01-52-54-00-12-34-56",
		"pxelinux.0",
		"../etc/passwd",
	} {
		req, err := bootconf.ParsePath(p)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(req.Kind, req.MAC, "->", req.Path())
	}
	// Output:
	// grub 52:54:00:12:34:56 -> grub/grub.cfg-01-52-54-00-12-34-56
	// pxelinux 52:54:00:12:34:56 -> pxelinux.cfg/01-52-54-00-12-34-56
	// bootconf: not a rendered config: "pxelinux.0"
	// bootconf: bad path "../etc/passwd": contains ".."
}
