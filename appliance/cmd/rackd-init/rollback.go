//go:build linux

package main

import "rackd/store/boltfile"

// restoreForRollback puts back the copy of the database this build's
// schema opens when the database is newer (the slot was rolled back after
// an update migrated it). It runs before rackd starts.
var restoreForRollback = boltfile.RestoreForRollback
