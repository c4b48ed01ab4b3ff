//go:build !linux

package main

import (
	"context"
	"errors"
	"os"
	"time"

	"rackd/enlist/inventory"
)

// realSystem outside Linux can only dry-run: there is no reboot call, no
// DHCP client and no /sys to read.
func realSystem() system {
	return system{stdout: os.Stdout, root: os.DirFS("/"), power: noPower{}, net: noNet{}}
}

var errNotLinux = errors.New("only Linux can do this")

type noPower struct{}

func (noPower) Reboot() error   { return errNotLinux }
func (noPower) PowerOff() error { return errNotLinux }

type noNet struct{}

func (noNet) Up(context.Context, []inventory.NIC, time.Duration) (inventory.NIC, error) {
	return inventory.NIC{}, errNotLinux
}
