package dhcptest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ClientHook writes the hook script that both ISC dhclient (variables new_*,
// $reason) and busybox udhcpc ($1, plain variables) call, and returns its
// path. Each call appends the event and its settings to out (read them with
// HookEvents) once it has configured the address with ipTool, which a
// renewal needs (it is unicast from the leased address).
func ClientHook(t testing.TB, ipTool, dir, out string) string {
	t.Helper()
	script := fmt.Sprintf(`#!/bin/sh
ev="${reason:-$1}"
addr="${new_ip_address:-$ip}"
mask="${new_subnet_mask:-$subnet}"
# The address first, then the record: a test that sees the event finds the
# address configured.
case "$ev" in
BOUND|RENEW|REBIND|REBOOT|bound|renew)
	%[2]s addr replace "$addr/$mask" dev "$interface" ;;
RELEASE|EXPIRE|FAIL|STOP|deconfig)
	%[2]s addr flush dev "$interface" scope global ;;
esac
{
	echo "event=$ev"
	echo "ip=$addr"
	echo "mask=$mask"
	echo "routers=${new_routers:-$router}"
	echo "dns=${new_domain_name_servers:-$dns}"
	echo "lease=${new_dhcp_lease_time:-$lease}"
	echo "domain=${new_domain_name:-$domain}"
	echo "hostname=${new_host_name:-$hostname}"
	echo "end"
} >> %[1]q
exit 0
`, out, ipTool)
	path := filepath.Join(dir, "hook.sh")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// HookEvents reads the records ClientHook's script appended to out.
func HookEvents(t testing.TB, out string) []map[string]string {
	t.Helper()
	b, err := os.ReadFile(out)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var evs []map[string]string
	cur := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "end" {
			evs = append(evs, cur)
			cur = map[string]string{}
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok {
			cur[k] = v
		}
	}
	return evs
}
