//go:build linux

package main

// restoreForRollback puts back the copy of the database this build's
// schema opens when the database is newer (the slot was rolled back after
// an update migrated it). Nil until the store has the function.
var restoreForRollback = func(stateDir string) (bool, error) { return false, nil }
