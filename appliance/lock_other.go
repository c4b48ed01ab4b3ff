//go:build !unix

package appliance

// lockFile is a no-op where flock is missing: the appliance runs Linux; the
// CLI elsewhere only reads and builds.
func lockFile(string) (func(), error) { return func() {}, nil }
