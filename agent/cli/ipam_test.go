package cli_test

import "testing"

const (
	subnet1  = `{"cidr":"10.0.0.0/24","gateway":"10.0.0.1","dns_servers":["10.0.0.2"],"domain":"lab.example","lease_seconds":3600,"dynamic_ranges":[{"start":"10.0.0.100","end":"10.0.0.149"},{"start":"10.0.0.200","end":"10.0.0.249"}],"reserved_ranges":[{"start":"10.0.0.2","end":"10.0.0.9"}],"created":"2025-01-01T00:00:00Z","dynamic_size":100,"dynamic_used":7,"future":1}`
	subnet2  = `{"cidr":"2001:db8::/64","lease_seconds":90,"created":"2025-01-01T00:00:00Z"}`
	reserved = `{"ip":"10.0.0.10","subnet":"10.0.0.0/24","kind":"reserved","mac":"aa:bb:cc:dd:ee:99","hostname":"sw1-mgmt","owner":"admin","purpose":"switch\tmgmt","created":"2025-01-01T00:00:00Z","future":1}`
	dynamic  = `{"ip":"10.0.0.100","subnet":"10.0.0.0/24","kind":"dynamic","mac":"aa:bb:cc:dd:ee:02","hostname":"pxe-client","expires":"2025-01-02T04:00:00Z"}`
	sticky   = `{"ip":"10.0.0.20","subnet":"10.0.0.0/24","kind":"sticky","mac":"aa:bb:cc:dd:ee:01","machine":"m-1","hostname":"web1","created":"2025-01-01T00:00:00Z"}`
	alias    = `{"ip":"10.0.0.21","subnet":"10.0.0.0/24","kind":"sticky","mac":"aa:bb:cc:dd:ee:01","machine":"m-1","hostname":"web1","owner":"alice"}`
	leases   = `[{"ip":"10.0.0.100","mac":"aa:bb:cc:dd:ee:02","hostname":"pxe-client","expires":"2025-01-02T04:00:00Z","subnet":"10.0.0.0/24"},{"ip":"10.0.0.101","mac":"aa:bb:cc:dd:ee:03","hostname":"","expires":"2025-01-02T04:30:00Z","subnet":"10.0.0.0/24","future":1}]`
)

const subnetsTable = `CIDR           GATEWAY   DOMAIN       LEASE  DYNAMIC                                      USED/SIZE
10.0.0.0/24    10.0.0.1  lab.example  1h     10.0.0.100-10.0.0.149,10.0.0.200-10.0.0.249  7/100
2001:db8::/64  -         -            90s    -                                            -
`

const addressHeader = "IP          KIND      MAC                MACHINE  HOSTNAME    OWNER  EXPIRES               PURPOSE\n"

const reservedTable = `IP         KIND      MAC                MACHINE  HOSTNAME  OWNER  EXPIRES  PURPOSE
10.0.0.10  reserved  aa:bb:cc:dd:ee:99  -        sw1-mgmt  admin  -        switch?mgmt
`

const aliasTable = `IP         KIND    MAC                MACHINE  HOSTNAME  OWNER  EXPIRES  PURPOSE
10.0.0.21  sticky  aa:bb:cc:dd:ee:01  m-1      web1      alice  -        -
`

func TestIPAMVerbs(t *testing.T) {
	runVerbCases(t, map[string]verbCase{
		"subnets add with everything": {
			args: []string{"subnets", "add", "10.0.0.0/24", "--gateway", "10.0.0.1", "--dns", "10.0.0.2", "--dns=10.0.0.3",
				"--domain", "lab.example", "--lease-seconds", "600", "--dynamic", "10.0.0.100-10.0.0.149",
				"--dynamic", " 10.0.0.200 - 10.0.0.249 ", "--reserved", "10.0.0.2-10.0.0.9"},
			routes: map[string]answer{"POST /api/v1/subnets": {201, subnet1}},
			want: []seen{{Method: "POST", Path: "/api/v1/subnets", Body: `{"cidr":"10.0.0.0/24","gateway":"10.0.0.1",
				"dns_servers":["10.0.0.2","10.0.0.3"],"domain":"lab.example","lease_seconds":600,
				"dynamic_ranges":[{"start":"10.0.0.100","end":"10.0.0.149"},{"start":"10.0.0.200","end":"10.0.0.249"}],
				"reserved_ranges":[{"start":"10.0.0.2","end":"10.0.0.9"}]}`}},
			stdout: `CIDR         GATEWAY   DOMAIN       LEASE  DYNAMIC                                      USED/SIZE
10.0.0.0/24  10.0.0.1  lab.example  1h     10.0.0.100-10.0.0.149,10.0.0.200-10.0.0.249  7/100
`,
		},
		"subnets add IPv6 --json": {
			args:   []string{"subnets", "add", "2001:db8::/64", "--dynamic", "2001:db8::100-2001:db8::1ff", "--json"},
			routes: map[string]answer{"POST /api/v1/subnets": {201, subnet2}},
			want: []seen{{Method: "POST", Path: "/api/v1/subnets",
				Body: `{"cidr":"2001:db8::/64","dynamic_ranges":[{"start":"2001:db8::100","end":"2001:db8::1ff"}]}`}},
			stdout: indent(t, subnet2),
		},
		"subnets add overlapping": {
			args:        []string{"subnets", "add", "10.0.0.0/16"},
			routes:      map[string]answer{"POST /api/v1/subnets": {409, `{"error":"10.0.0.0/16 overlaps 10.0.0.0/24","code":"conflict"}`}},
			want:        []seen{{Method: "POST", Path: "/api/v1/subnets", Body: `{"cidr":"10.0.0.0/16"}`}},
			code:        1,
			errContains: []string{"rackd: 10.0.0.0/16 overlaps 10.0.0.0/24 (conflict, HTTP 409)\n"},
		},
		"subnets add refused by the server": {
			args:        []string{"subnets", "add", "10.0.0.0/24", "--gateway", "10.0.0.150", "--dynamic", "10.0.0.100-10.0.0.199"},
			routes:      map[string]answer{"POST /api/v1/subnets": {400, `{"error":"the gateway 10.0.0.150 is in a dynamic range","code":"bad_request"}`}},
			want:        []seen{{Method: "POST", Path: "/api/v1/subnets", Body: `{"cidr":"10.0.0.0/24","gateway":"10.0.0.150","dynamic_ranges":[{"start":"10.0.0.100","end":"10.0.0.199"}]}`}},
			code:        1,
			errContains: []string{"rackd: the gateway 10.0.0.150 is in a dynamic range (bad_request, HTTP 400)\n"},
		},
		"subnets list": {
			args:   []string{"subnets", "list"},
			routes: map[string]answer{"GET /api/v1/subnets": {200, "[" + subnet1 + "," + subnet2 + "]"}},
			want:   []seen{{Method: "GET", Path: "/api/v1/subnets"}},
			stdout: subnetsTable,
		},
		"subnets list --json keeps unknown fields": {
			args:   []string{"--json", "subnets", "list"},
			routes: map[string]answer{"GET /api/v1/subnets": {200, "[" + subnet1 + "]"}},
			want:   []seen{{Method: "GET", Path: "/api/v1/subnets"}},
			stdout: indent(t, "["+subnet1+"]"),
		},
		"subnets list empty": {
			args:   []string{"subnets", "list"},
			routes: map[string]answer{"GET /api/v1/subnets": {200, "[]"}},
			want:   []seen{{Method: "GET", Path: "/api/v1/subnets"}},
			stdout: "CIDR  GATEWAY  DOMAIN  LEASE  DYNAMIC  USED/SIZE\n",
		},
		"ips reserve an address for a device": {
			args:   []string{"ips", "reserve", "10.0.0.10", "--mac", "AA:BB:CC:DD:EE:99", "--hostname", "sw1-mgmt", "--purpose", "switch mgmt"},
			routes: map[string]answer{"POST /api/v1/ips/reservations": {201, reserved}},
			want: []seen{{Method: "POST", Path: "/api/v1/ips/reservations",
				Body: `{"ip":"10.0.0.10","mac":"AA:BB:CC:DD:EE:99","hostname":"sw1-mgmt","purpose":"switch mgmt"}`}},
			stdout: reservedTable,
		},
		"ips reserve the first free address of a subnet": {
			args:   []string{"ips", "reserve", "--subnet", "10.0.0.0/24", "--purpose", "VIP"},
			routes: map[string]answer{"POST /api/v1/ips/reservations": {201, reserved}},
			want:   []seen{{Method: "POST", Path: "/api/v1/ips/reservations", Body: `{"subnet":"10.0.0.0/24","purpose":"VIP"}`}},
			stdout: reservedTable,
		},
		"ips reserve --json": {
			args:   []string{"ips", "reserve", "--json", "10.0.0.10"},
			routes: map[string]answer{"POST /api/v1/ips/reservations": {201, reserved}},
			want:   []seen{{Method: "POST", Path: "/api/v1/ips/reservations", Body: `{"ip":"10.0.0.10"}`}},
			stdout: indent(t, reserved),
		},
		"ips reserve a held address": {
			args:        []string{"ips", "reserve", "10.0.0.20"},
			routes:      map[string]answer{"POST /api/v1/ips/reservations": {409, `{"error":"10.0.0.20 is held by machine web1","code":"ip_in_use"}`}},
			want:        []seen{{Method: "POST", Path: "/api/v1/ips/reservations", Body: `{"ip":"10.0.0.20"}`}},
			code:        1,
			errContains: []string{"rackd: 10.0.0.20 is held by machine web1 (ip_in_use, HTTP 409)\n"},
		},
		"ips release": {
			args:   []string{"ips", "release", "10.0.0.10"},
			routes: map[string]answer{"DELETE /api/v1/ips/reservations/10.0.0.10": {200, reserved}},
			want:   []seen{{Method: "DELETE", Path: "/api/v1/ips/reservations/10.0.0.10"}},
			stdout: reservedTable,
		},
		"ips release IPv6 --json": {
			args:   []string{"ips", "release", "2001:db8::10", "--json"},
			routes: map[string]answer{"DELETE /api/v1/ips/reservations/2001:db8::10": {200, reserved}},
			want:   []seen{{Method: "DELETE", Path: "/api/v1/ips/reservations/2001:db8::10"}},
			stdout: indent(t, reserved),
		},
		"ips release someone else's": {
			args:        []string{"ips", "release", "10.0.0.10"},
			routes:      map[string]answer{"DELETE /api/v1/ips/reservations/10.0.0.10": {403, `{"error":"10.0.0.10 is reserved by admin","code":"forbidden"}`}},
			want:        []seen{{Method: "DELETE", Path: "/api/v1/ips/reservations/10.0.0.10"}},
			code:        1,
			errContains: []string{"rackd: 10.0.0.10 is reserved by admin (forbidden, HTTP 403)\n"},
		},
		"ips list": {
			args:   []string{"ips", "list"},
			routes: map[string]answer{"GET /api/v1/ips": {200, "[" + reserved + "," + sticky + "," + dynamic + "]"}},
			want:   []seen{{Method: "GET", Path: "/api/v1/ips"}},
			stdout: addressHeader +
				"10.0.0.10   reserved  aa:bb:cc:dd:ee:99  -        sw1-mgmt    admin  -                     switch?mgmt\n" +
				"10.0.0.20   sticky    aa:bb:cc:dd:ee:01  m-1      web1        -      -                     -\n" +
				"10.0.0.100  dynamic   aa:bb:cc:dd:ee:02  -        pxe-client  -      2025-01-02T04:00:00Z  -\n",
		},
		"ips list --kind": {
			args:   []string{"ips", "list", "--kind", "Sticky"},
			routes: map[string]answer{"GET /api/v1/ips": {200, "[" + alias + "]"}},
			want:   []seen{{Method: "GET", Path: "/api/v1/ips", Query: "kind=sticky"}},
			stdout: aliasTable,
		},
		"ips list --json": {
			args:   []string{"ips", "list", "--kind=reserved", "--json"},
			routes: map[string]answer{"GET /api/v1/ips": {200, "[" + reserved + "]"}},
			want:   []seen{{Method: "GET", Path: "/api/v1/ips", Query: "kind=reserved"}},
			stdout: indent(t, "["+reserved+"]"),
		},
		"ips list unknown kind": {
			args:        []string{"ips", "list", "--kind", "static"},
			routes:      map[string]answer{"GET /api/v1/ips": {400, `{"error":"unknown kind \"static\": want dynamic, sticky, reserved or discovered","code":"bad_request"}`}},
			want:        []seen{{Method: "GET", Path: "/api/v1/ips", Query: "kind=static"}},
			code:        1,
			errContains: []string{`rackd: unknown kind "static": want dynamic, sticky, reserved or discovered (bad_request, HTTP 400)`},
		},
		"leases": {
			args:   []string{"leases"},
			routes: map[string]answer{"GET /api/v1/leases": {200, leases}},
			want:   []seen{{Method: "GET", Path: "/api/v1/leases"}},
			stdout: `IP          MAC                HOSTNAME    EXPIRES               SUBNET
10.0.0.100  aa:bb:cc:dd:ee:02  pxe-client  2025-01-02T04:00:00Z  10.0.0.0/24
10.0.0.101  aa:bb:cc:dd:ee:03  -           2025-01-02T04:30:00Z  10.0.0.0/24
`,
		},
		"leases --json": {
			args:   []string{"leases", "--json"},
			routes: map[string]answer{"GET /api/v1/leases": {200, leases}},
			want:   []seen{{Method: "GET", Path: "/api/v1/leases"}},
			stdout: indent(t, leases),
		},
		"machines set-ip alias": {
			args: []string{"machines", "set-ip", "web1", "--mac", "aa:bb:cc:dd:ee:01", "--ip", "10.0.0.21", "--subnet", "10.0.0.0/24",
				"--alias", "--reason", "service VIP"},
			routes: map[string]answer{"POST /api/v1/machines/web1/ips": {201, alias}},
			want: []seen{{Method: "POST", Path: "/api/v1/machines/web1/ips",
				Body: `{"mac":"aa:bb:cc:dd:ee:01","ip":"10.0.0.21","subnet":"10.0.0.0/24","alias":true,"reason":"service VIP"}`}},
			stdout: aliasTable,
		},
		"machines set-ip next free --json": {
			args:   []string{"machines", "set-ip", "--mac=aa:bb:cc:dd:ee:01", "web 1", "--json"},
			routes: map[string]answer{"POST /api/v1/machines/web%201/ips": {201, sticky}},
			want:   []seen{{Method: "POST", Path: "/api/v1/machines/web%201/ips", Body: `{"mac":"aa:bb:cc:dd:ee:01"}`}},
			stdout: indent(t, sticky),
		},
		"machines set-ip in a dynamic range": {
			args:        []string{"machines", "set-ip", "web1", "--mac", "aa:bb:cc:dd:ee:01", "--ip", "10.0.0.120"},
			routes:      map[string]answer{"POST /api/v1/machines/web1/ips": {400, `{"error":"10.0.0.120 is in a dynamic range","code":"bad_request"}`}},
			want:        []seen{{Method: "POST", Path: "/api/v1/machines/web1/ips", Body: `{"mac":"aa:bb:cc:dd:ee:01","ip":"10.0.0.120"}`}},
			code:        1,
			errContains: []string{"rackd: 10.0.0.120 is in a dynamic range (bad_request, HTTP 400)\n"},
		},
		"machines unset-ip": {
			args:   []string{"machines", "unset-ip", "web1", "10.0.0.21"},
			routes: map[string]answer{"DELETE /api/v1/machines/web1/ips/10.0.0.21": {200, alias}},
			want:   []seen{{Method: "DELETE", Path: "/api/v1/machines/web1/ips/10.0.0.21"}},
			stdout: aliasTable,
		},
		"machines unset-ip --json": {
			args:   []string{"machines", "unset-ip", "web1", "10.0.0.21", "--json"},
			routes: map[string]answer{"DELETE /api/v1/machines/web1/ips/10.0.0.21": {200, alias}},
			want:   []seen{{Method: "DELETE", Path: "/api/v1/machines/web1/ips/10.0.0.21"}},
			stdout: indent(t, alias),
		},
		"machines unset-ip not the machine's": {
			args:        []string{"machines", "unset-ip", "web1", "10.0.0.99"},
			routes:      map[string]answer{"DELETE /api/v1/machines/web1/ips/10.0.0.99": {404, `{"error":"web1 has no address 10.0.0.99","code":"not_found"}`}},
			want:        []seen{{Method: "DELETE", Path: "/api/v1/machines/web1/ips/10.0.0.99"}},
			code:        1,
			errContains: []string{"rackd: web1 has no address 10.0.0.99 (not_found, HTTP 404)\n"},
		},
		"machines show lists every address": {
			args: []string{"machines", "show", "web1"},
			routes: map[string]answer{
				"GET /api/v1/machines/web1": {200, `{"id":"m-1","hostname":"web1","state":"DEPLOYED","ips":[` +
					`{"ip":"10.0.0.20","mac":"aa:bb:cc:dd:ee:01","kind":"sticky"},{"ip":"10.0.0.21","mac":"aa:bb:cc:dd:ee:01","kind":"sticky"},` +
					`{"ip":"2001:db8::20","mac":"aa:bb:cc:dd:ee:02","kind":"dynamic"}]}`},
				"GET /api/v1/machines/m-1/events": {200, "[]"},
			},
			want: []seen{{Method: "GET", Path: "/api/v1/machines/web1"}, {Method: "GET", Path: "/api/v1/machines/m-1/events"}},
			contains: []string{"IPs:         10.0.0.20 (sticky on aa:bb:cc:dd:ee:01), 10.0.0.21 (sticky on aa:bb:cc:dd:ee:01), " +
				"2001:db8::20 (dynamic on aa:bb:cc:dd:ee:02)\n"},
		},
	})
}

func TestIPAMUsage(t *testing.T) {
	const rangeWant = "want START-END, e.g. 10.0.0.100-10.0.0.199"
	runUsageCases(t, map[string]usageCase{
		"help lists the verbs": {args: []string{"help"}, stdout: []string{"subnets add CIDR", "subnets list", "ips reserve (IP | --subnet CIDR)",
			"ips release IP", "ips list", "\n  leases ", "machines set-ip ID", "machines unset-ip ID IP"}},
		"subnets -h":       {args: []string{"subnets", "-h"}, stdout: []string{"Usage: rackd subnets COMMAND", "add CIDR", "list"}},
		"ips alone":        {args: []string{"ips"}, code: 2, errContains: []string{"Usage: rackd ips COMMAND", "reserve (IP | --subnet CIDR)"}},
		"help ips reserve": {args: []string{"help", "ips", "reserve"}, stdout: []string{"Usage: rackd ips reserve (IP | --subnet CIDR) [--mac M] [--hostname H] [--purpose P]", "--subnet CIDR"}},
		"subnets add -h": {args: []string{"subnets", "add", "-h"}, stdout: []string{
			"Usage: rackd subnets add CIDR [--gateway IP] [--dns IP ...]", "--dynamic START-END", "--reserved START-END", "--lease-seconds N"}},
		"machines set-ip -h": {args: []string{"machines", "set-ip", "-h"}, stdout: []string{"Usage: rackd machines set-ip ID --mac M [--ip IP] [--subnet CIDR] [--alias] [--reason R]"}},
		"subnets add without CIDR": {args: []string{"subnets", "add", "--gateway", "10.0.0.1"}, code: 2,
			errContains: []string{"rackd subnets add: missing CIDR\n", "Usage: rackd subnets add CIDR"}},
		"range without a dash": {args: []string{"subnets", "add", "10.0.0.0/24", "--dynamic", "10.0.0.100"}, code: 2,
			errContains: []string{`rackd subnets add: invalid value "10.0.0.100" for flag -dynamic: ` + rangeWant, "Usage: rackd subnets add CIDR"}},
		"range without an end": {args: []string{"subnets", "add", "10.0.0.0/24", "--reserved", "10.0.0.2-"}, code: 2,
			errContains: []string{`invalid value "10.0.0.2-" for flag -reserved: ` + rangeWant}},
		"range without a start": {args: []string{"subnets", "add", "10.0.0.0/24", "--dynamic=-10.0.0.9"}, code: 2,
			errContains: []string{`invalid value "-10.0.0.9" for flag -dynamic: ` + rangeWant}},
		"range of three": {args: []string{"subnets", "add", "10.0.0.0/24", "--dynamic", "10.0.0.1-10.0.0.2-10.0.0.3"}, code: 2,
			errContains: []string{`for flag -dynamic: ` + rangeWant}},
		"range of CIDRs": {args: []string{"subnets", "add", "10.0.0.0/24", "--dynamic", "10.0.0.0/25-10.0.0.9"}, code: 2,
			errContains: []string{`for flag -dynamic: "10.0.0.0/25" is not an IP address`}},
		"range of names": {args: []string{"subnets", "add", "10.0.0.0/24", "--reserved", "10.0.0.2-sw1"}, code: 2,
			errContains: []string{`for flag -reserved: "sw1" is not an IP address`}},
		"negative lease": {args: []string{"subnets", "add", "10.0.0.0/24", "--lease-seconds", "-1"}, code: 2,
			errContains: []string{"--lease-seconds must not be negative"}},
		"lease not a number": {args: []string{"subnets", "add", "10.0.0.0/24", "--lease-seconds", "1h"}, code: 2,
			errContains: []string{`invalid value "1h" for flag -lease-seconds`}},
		"subnets list takes no args": {args: []string{"subnets", "list", "10.0.0.0/24"}, code: 2, errContains: []string{`unexpected argument "10.0.0.0/24"`}},
		"reserve neither IP nor subnet": {args: []string{"ips", "reserve", "--mac", "aa:bb:cc:dd:ee:99"}, code: 2,
			errContains: []string{"rackd ips reserve: give the IP to reserve, or --subnet CIDR for the first free one\n", "Usage: rackd ips reserve (IP | --subnet CIDR)"}},
		"reserve both IP and subnet": {args: []string{"ips", "reserve", "10.0.0.10", "--subnet", "10.0.0.0/24"}, code: 2,
			errContains: []string{"give the IP or --subnet, not both"}},
		"reserve two IPs":        {args: []string{"ips", "reserve", "10.0.0.10", "10.0.0.11"}, code: 2, errContains: []string{`rackd ips reserve: unexpected argument "10.0.0.11"`}},
		"reserve empty IP":       {args: []string{"ips", "reserve", ""}, code: 2, errContains: []string{"rackd ips reserve: empty IP"}},
		"release without IP":     {args: []string{"ips", "release"}, code: 2, errContains: []string{"rackd ips release: missing IP\n"}},
		"ips list takes no args": {args: []string{"ips", "list", "reserved"}, code: 2, errContains: []string{`unexpected argument "reserved"`}},
		"ips unknown verb":       {args: []string{"ips", "free"}, code: 2, errContains: []string{`rackd ips: unknown command "free"`}},
		"leases takes no args":   {args: []string{"leases", "10.0.0.0/24"}, code: 2, errContains: []string{`rackd leases: unexpected argument "10.0.0.0/24"`}},
		"set-ip without mac": {args: []string{"machines", "set-ip", "web1", "--ip", "10.0.0.21"}, code: 2,
			errContains: []string{"rackd machines set-ip: --mac is required\n", "Usage: rackd machines set-ip ID --mac M"}},
		"set-ip without ID": {args: []string{"machines", "set-ip", "--mac", "aa:bb:cc:dd:ee:01"}, code: 2, errContains: []string{"rackd machines set-ip: missing ID\n"}},
		"set-ip alias takes no value": {args: []string{"machines", "set-ip", "web1", "--mac", "m", "--alias=maybe"}, code: 2,
			errContains: []string{`invalid boolean value "maybe" for -alias`}},
		"unset-ip without IP":   {args: []string{"machines", "unset-ip", "web1"}, code: 2, errContains: []string{"rackd machines unset-ip: missing IP\n", "Usage: rackd machines unset-ip ID IP"}},
		"unset-ip without both": {args: []string{"machines", "unset-ip"}, code: 2, errContains: []string{"rackd machines unset-ip: missing ID IP\n"}},
	})
}
