package queue

import (
	"context"

	"rackd/power"
	"rackd/store"
)

// Store is what the queue needs of rackd's store: the durable half of the
// queue (requests and their fates) and the machines' power parameters and
// status. *store.Store implements it; a test may hand in a narrower fake or
// wrap the store to inject failures.
type Store interface {
	// OnPowerRequest sets the function told about every machine that got
	// a new request, after the commit.
	OnPowerRequest(fn func(machine string))
	// MachinesWithOpenPower lists machines with pending or running requests.
	MachinesWithOpenPower() ([]string, error)
	// OpenPowerRequests returns one machine's open requests, oldest first.
	OpenPowerRequests(machine string) ([]store.PowerRequest, error)
	// OpenPowerCount is how many requests are pending or running.
	OpenPowerCount() (int, error)
	// MachineForPower returns one machine (its power parameters with its
	// BMC secrets opened, its state).
	MachineForPower(id string) (store.Machine, error)
	// ListMachines lists machines (the periodic poll walks all of them).
	ListMachines(f store.Filter) ([]store.Machine, error)

	// StartPower marks a request running and folds others into it.
	StartPower(ctx context.Context, id string, fold []string) (store.PowerRequest, error)
	// PowerProgress records the attempts and phase of a running request.
	PowerProgress(ctx context.Context, id string, attempts int, phase string) error
	// SupersedePower ends an open request that a newer one (by) replaces.
	SupersedePower(ctx context.Context, id, by string) error
	// FinishPower writes a request's fate and the power last observed.
	FinishPower(ctx context.Context, id string, state store.PowerRequestState, attempts int, errText string, observed power.State) (store.PowerRequest, error)
	// PinPowerCertificate records the BMC certificate a driver trusted on
	// first use (refused if the machine's power address changed meanwhile).
	PinPowerCertificate(ctx context.Context, machine, address, fingerprint string) error
	// ObservePower records a polled power state and acts on drift.
	ObservePower(ctx context.Context, machine string, observed power.State) (store.Observation, error)
}

var _ Store = (*store.Store)(nil)
