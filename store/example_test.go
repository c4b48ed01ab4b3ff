package store_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"rackd/store"
)

// The allocate-by-name flow: a planning tool reserves a machine
// under an agent name it chose, asking again is harmless, and the machine is
// handed to another tool (here another user's) by giving it the allocation
// token.
func ExampleStore_Allocate() {
	dir, err := os.MkdirTemp("", "rackd-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	s, err := store.Open(filepath.Join(dir, store.FileName), store.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()

	admin := store.Actor{Name: "admin", Admin: true}
	_, err = s.CreateMachine(ctx, admin, store.NewMachine{
		Hostname: "elkhart", MACs: []string{"52:54:00:12:34:56"}, State: store.StateReady})
	if err != nil {
		log.Fatal(err)
	}

	// Landscape picks the machine for a deployment, under a UUID of its own.
	landscape := store.Actor{Name: "landscape"}
	got, err := s.Allocate(ctx, landscape, store.AllocateRequest{Name: "elkhart", AgentName: "autopilot-7f3a"})
	fmt.Println("reserved:", got.Machine.State, got.Machine.Owner, got.Created, got.Token != "", err)
	token := got.Token // shown this once

	// The same owner and agent name asking again: a no-op success.
	again, err := s.Allocate(ctx, landscape, store.AllocateRequest{Name: "elkhart", AgentName: "autopilot-7f3a"})
	fmt.Println("again:", again.Machine.Owner, again.Created, again.Token == "", err)

	// Anybody else, even the same owner under another agent name, is refused.
	_, err = s.Allocate(ctx, landscape, store.AllocateRequest{Name: "elkhart", AgentName: "other"})
	fmt.Println("other agent:", store.CodeOf(err))

	// Juju, given the token, adopts the allocation under its own agent name.
	juju := store.Actor{Name: "juju"}
	adopted, err := s.Allocate(ctx, juju, store.AllocateRequest{Name: "elkhart", AgentName: "model-42", Token: token})
	fmt.Println("adopted:", adopted.Adopted, adopted.Machine.Owner, adopted.Machine.AgentName, adopted.Token != token, err)

	// The old token died with the hand-over.
	_, err = s.Allocate(ctx, landscape, store.AllocateRequest{Name: "elkhart", AgentName: "autopilot-7f3a", Token: token})
	fmt.Println("old token:", store.CodeOf(err))

	// Allocating by constraints never returns a held machine, not even to
	// its holder.
	_, err = s.Allocate(ctx, juju, store.AllocateRequest{AgentName: "model-42"})
	fmt.Println("by constraints:", store.CodeOf(err))

	// Output:
	// reserved: ALLOCATED landscape true true <nil>
	// again: landscape false true <nil>
	// other agent: allocated
	// adopted: true juju model-42 true <nil>
	// old token: allocated
	// by constraints: no_available_machine
}
