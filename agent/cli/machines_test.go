package cli_test

import "testing"

// TestMachinesSetRm: machines set sends a merge patch with exactly the
// flags given (the password from the environment when power flags are
// given), machines rm a delete; refusals and contradictions are reported.
func TestMachinesSetRm(t *testing.T) {
	one := answer{200, machine1}
	manual := answer{200, `{"id":"m-1","hostname":"web1","state":"COMMISSIONING","arch":"amd64","macs":[],"tags":[],"ips":[],
		"power":{"driver":"manual","desired":"on","observed":"unknown"},
		"notice":"machine web1 has the manual power driver, so rackd cannot power it: power it on yourself now, booting from the network (PXE)"}`}
	runVerbCases(t, map[string]verbCase{
		"set credentials only": {
			args:   []string{"machines", "set", "web1", "--power-user", "admin"},
			env:    map[string]string{"RACKD_POWER_PASSWORD": "from-env"},
			routes: map[string]answer{"PATCH /api/v1/machines/web1": one},
			want: []seen{{Method: "PATCH", Path: "/api/v1/machines/web1",
				Body: `{"power":{"username":"admin","password":"from-env"}}`}},
			contains: []string{"Hostname:    web1\n", "Power:       ipmi, desired off, observed off\n"},
		},
		"set driver and address, password flag wins": {
			args: []string{"machines", "set", "web1", "--power-driver", "ipmi", "--power-address", "10.0.0.9",
				"--power-password", "pw", "--power-cipher", "17", "--reason", "BMC cabled", "--json"},
			env:    map[string]string{"RACKD_POWER_PASSWORD": "from-env"},
			routes: map[string]answer{"PATCH /api/v1/machines/web1": one},
			want: []seen{{Method: "PATCH", Path: "/api/v1/machines/web1",
				Body: `{"power":{"driver":"ipmi","address":"10.0.0.9","password":"pw","cipher_suite":17},"reason":"BMC cabled"}`}},
			stdout: indent(t, machine1),
		},
		"set other fields, no power: env ignored": {
			args: []string{"machines", "set", "web1", "--hostname", "web9", "--arch", "arm64", "--tag", "a", "--tag", "b",
				"--zone", "", "--cpu", "0", "--memory-mb", "2048"},
			env:    map[string]string{"RACKD_POWER_PASSWORD": "from-env"},
			routes: map[string]answer{"PATCH /api/v1/machines/web1": one},
			want: []seen{{Method: "PATCH", Path: "/api/v1/machines/web1",
				Body: `{"hostname":"web9","arch":"arm64","cpu_count":0,"memory_mb":2048,"tags":["a","b"],"zone":""}`}},
			contains: []string{"Hostname:    web1\n"},
		},
		"set --no-tags --no-power": {
			args:     []string{"machines", "set", "web1", "--no-tags", "--no-power"},
			routes:   map[string]answer{"PATCH /api/v1/machines/web1": one},
			want:     []seen{{Method: "PATCH", Path: "/api/v1/machines/web1", Body: `{"tags":[],"power":null}`}},
			contains: []string{"Hostname:    web1\n"},
		},
		"set nothing": {
			args: []string{"machines", "set", "web1", "--reason", "x"}, code: 2,
			errContains: []string{"nothing to change"},
		},
		"set contradictions": {
			args: []string{"machines", "set", "web1", "--tag", "a", "--no-tags"}, code: 2,
			errContains: []string{"--tag and --no-tags"},
		},
		"set refused": {
			args: []string{"machines", "set", "web1", "--power-driver", "amt"},
			routes: map[string]answer{"PATCH /api/v1/machines/web1": {400,
				`{"error":"power driver \"amt\" is not in this rackd (known: ipmi, manual, redfish)","code":"bad_request"}`}},
			want:        []seen{{Method: "PATCH", Path: "/api/v1/machines/web1", Body: `{"power":{"driver":"amt"}}`}},
			code:        1,
			errContains: []string{`rackd: power driver "amt" is not in this rackd (known: ipmi, manual, redfish) (bad_request, HTTP 400)`},
		},
		"set redfish with its TLS and boot flags": {
			args: []string{"machines", "set", "web1", "--power-driver", "redfish", "--power-address", "https://10.0.0.9",
				"--power-tls-fingerprint", "", "--power-insecure-tls=false", "--power-boot-mode", "uefi"},
			routes: map[string]answer{"PATCH /api/v1/machines/web1": one},
			want: []seen{{Method: "PATCH", Path: "/api/v1/machines/web1",
				Body: `{"power":{"driver":"redfish","address":"https://10.0.0.9","tls_fingerprint":"","insecure_tls":false,"boot_mode":"uefi"}}`}},
			contains: []string{"Hostname:    web1\n"},
		},
		"set --no-power with a TLS flag": {
			args: []string{"machines", "set", "web1", "--no-power", "--power-insecure-tls"}, code: 2,
			errContains: []string{"--no-power and --power-* flags contradict"},
		},
		"rm": {
			args:   []string{"machines", "rm", "web1"},
			routes: map[string]answer{"DELETE /api/v1/machines/web1": one},
			want:   []seen{{Method: "DELETE", Path: "/api/v1/machines/web1", Body: `{}`}},
			stdout: "Deleted web1 (m-1); its events: rackd machines events m-1\n",
		},
		"rm --force --reason": {
			args:   []string{"machines", "rm", "--force", "web1", "--reason", "sold"},
			routes: map[string]answer{"DELETE /api/v1/machines/web1": one},
			want:   []seen{{Method: "DELETE", Path: "/api/v1/machines/web1", Body: `{"force":true,"reason":"sold"}`}},
			stdout: "Deleted web1 (m-1); its events: rackd machines events m-1\n",
		},
		"rm refused while allocated": {
			args: []string{"machines", "rm", "web1"},
			routes: map[string]answer{"DELETE /api/v1/machines/web1": {409,
				`{"error":"machine web1 is not deleted: it is ALLOCATED and allocated to bob (release it first, or force)","code":"conflict"}`}},
			want:        []seen{{Method: "DELETE", Path: "/api/v1/machines/web1", Body: `{}`}},
			code:        1,
			errContains: []string{"it is ALLOCATED and allocated to bob", "(conflict, HTTP 409)"},
		},
		"commission with the manual driver says what to do": {
			args:        []string{"machines", "commission", "web1"},
			routes:      map[string]answer{"POST /api/v1/machines/web1/commission": manual},
			want:        []seen{{Method: "POST", Path: "/api/v1/machines/web1/commission", Body: `{}`}},
			contains:    []string{"web1      COMMISSIONING"},
			errContains: []string{"rackd: machine web1 has the manual power driver, so rackd cannot power it: power it on yourself now, booting from the network (PXE)\n"},
		},
		"commission without a power driver": {
			args: []string{"machines", "commission", "web1"},
			routes: map[string]answer{"POST /api/v1/machines/web1/commission": {409,
				`{"error":"machine web1 has no power driver, so nothing would boot it: set one with rackd machines set web1 --power-driver ipmi --power-address HOST --power-user USER (or --power-driver manual to power it by hand)","code":"conflict"}`}},
			want:        []seen{{Method: "POST", Path: "/api/v1/machines/web1/commission", Body: `{}`}},
			code:        1,
			errContains: []string{"rackd machines set web1 --power-driver ipmi"},
		},
	})
}
