// Command brokenrackd stands in for rackd in an appliance slot that must
// fail: whatever it is asked, it says so and exits 1 at once, as a rackd
// that cannot start would. The appliance's rollback test builds a slot with
// it (scripts/appliance-image.sh, APPLIANCE_RACKD_PKG=./internal/brokenrackd):
// the slot boots, its rackd never becomes healthy, and the appliance must
// return to the good slot by itself.
package main

import (
	"fmt"
	"os"
	"strings"
)

func main() {
	fmt.Fprintf(os.Stderr, "brokenrackd: a test build of rackd that fails at start (asked: %s)\n", strings.Join(os.Args[1:], " "))
	os.Exit(1)
}
