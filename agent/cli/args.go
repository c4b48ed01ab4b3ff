package cli

import (
	"flag"
	"strings"
)

// parseArgs parses fs from args and returns the positional arguments. Unlike
// fs.Parse, which stops at the first positional argument, it lets flags come
// before or after them (rackd machines show web1 --json), as users expect
// from most CLIs. "--" still ends the flags: what follows is positional.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, &flagError{err}
		}
		rest := fs.Args()
		// fs.Parse consumes a "--" it stops at; if that is what it stopped
		// at, everything left is positional.
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" && (n < 2 || !needsValue(fs, args[n-2])) {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// needsValue reports whether arg is a flag of fs that took the next argument
// as its value, as in --reason --, where the "--" is a reason, not the end of
// the flags.
func needsValue(fs *flag.FlagSet, arg string) bool {
	name, ok := strings.CutPrefix(arg, "-")
	if !ok {
		return false
	}
	name = strings.TrimPrefix(name, "-")
	if name == "" || strings.Contains(name, "=") {
		return false
	}
	f := fs.Lookup(name)
	if f == nil {
		return false
	}
	b, isBool := f.Value.(interface{ IsBoolFlag() bool })
	return !isBool || !b.IsBoolFlag()
}

// stringList is a repeatable string flag: --mac A --mac B.
type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }

func (s *stringList) Set(v string) error {
	*s = append(*s, v)
	return nil
}
