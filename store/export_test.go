package store

// QueuedOps is how many operations wait for s's committer: tests outside
// the package order concurrent operations by it.
func QueuedOps(s *Store) int { return len(s.ops) }
