// Package power is the BMC side of rackd (docs/ARCHITECTURE.md section 6): the Driver
// interface every BMC driver implements (power/ipmi, power/manual, and the
// fake in power/powertest), the power State and BootDevice types, and the
// error kinds the queue (power/queue) retries on and counts by. Desired
// power per machine and the per-state policy live in the store; the queue
// carries requests to the drivers.
package power
