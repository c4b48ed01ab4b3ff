// Package power will hold the BMC driver interface and the serialised,
// crash-safe power queue. See DESIGN.md section 4; not built yet.
package power
