package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"rackd/agent/cli"
)

// seen is one request the fake API got.
type seen struct {
	Method, Path, Query, Auth string
	Body                      string // JSON, or "" when the request had none
}

// answer is what the fake API sends for one "METHOD /path".
type answer struct {
	status int
	body   string
}

type fakeAPI struct {
	srv    *httptest.Server
	mu     sync.Mutex
	got    []seen
	routes map[string]answer
}

func newFake(t *testing.T, routes map[string]answer) *fakeAPI {
	t.Helper()
	f := &fakeAPI{routes: routes}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.got = append(f.got, seen{Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.RawQuery,
			Auth: r.Header.Get("Authorization"), Body: string(b)})
		f.mu.Unlock()
		a, ok := f.routes[r.Method+" "+r.URL.EscapedPath()]
		if !ok {
			a = answer{404, `{"error":"no route in the fake","code":"not_found"}`}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.status)
		io.WriteString(w, a.body+"\n")
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAPI) requests() []seen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seen(nil), f.got...)
}

// isolate clears the environment the CLI reads, so that the tests never see
// the developer's own RACKD_* settings or token files.
func isolate(t *testing.T) {
	t.Helper()
	for _, k := range []string{"RACKD_URL", "RACKD_TOKEN", "RACKD_POWER_PASSWORD"} {
		t.Setenv(k, "")
	}
	t.Setenv("RACKD_STATE_DIR", t.TempDir()) // empty: no admin.token
}

func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = cli.Main(context.Background(), args, &out, &errOut, nil)
	return code, out.String(), errOut.String()
}

const (
	machine1 = `{"id":"m-1","hostname":"web1","state":"READY","arch":"amd64","macs":["aa:bb:cc:dd:ee:01"],"owner":"","agent_name":"","cpu_count":8,"memory_mb":16384,"tags":["ssd","big"],"ips":[{"ip":"10.0.0.5","mac":"aa:bb:cc:dd:ee:01","kind":"sticky"}],"power":{"driver":"ipmi","desired":"off","observed":"off"},"state_since":"2025-01-02T03:04:05Z","created":"2025-01-01T00:00:00Z","future":1}`
	machine2 = `{"id":"m-2","hostname":"db1","state":"ALLOCATED","arch":"arm64","macs":[],"owner":"alice","agent_name":"j1","cpu_count":0,"memory_mb":1536,"tags":[],"ips":[],"power":{"driver":"","desired":"on","observed":"on"}}`
	events1  = `[{"seq":1,"time":"2025-01-01T00:00:00Z","machine":"m-1","actor":"admin","action":"create","to":"NEW"},{"seq":2,"time":"2025-01-02T03:04:05Z","machine":"m-1","actor":"admin","action":"commission","from":"NEW","to":"COMMISSIONING","reason":"new\tdisk\u001b[31m"}]`
)

const machinesTable = `ID   HOSTNAME  STATE      ARCH   CPU  MEM    OWNER  AGENT  TAGS
m-1  web1      READY      amd64  8    16G    -      -      ssd,big
m-2  db1       ALLOCATED  arm64  -    1536M  alice  j1     -
`

const web1Row = `ID   HOSTNAME  STATE  ARCH   CPU  MEM  OWNER  AGENT  TAGS
m-1  web1      READY  amd64  8    16G  -      -      ssd,big
`

func indent(t *testing.T, s string) string {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Indent(&buf, []byte(s), "", "  "); err != nil {
		t.Fatal(err)
	}
	return buf.String() + "\n"
}

// verbCase runs a command against the fake API.
type verbCase struct {
	args   []string
	env    map[string]string
	routes map[string]answer
	want   []seen // requests, in order; Auth defaults to "Bearer tok"
	code   int
	stdout string // exact, unless empty
	// contains are substrings of stdout, errContains of stderr.
	contains, errContains []string
}

func TestVerbs(t *testing.T) {
	list := answer{200, "[" + machine1 + "," + machine2 + "]"}
	one := answer{200, machine1}
	runVerbCases(t, map[string]verbCase{
		"machines list": {
			args:   []string{"machines", "list"},
			routes: map[string]answer{"GET /api/v1/machines": list},
			want:   []seen{{Method: "GET", Path: "/api/v1/machines"}},
			stdout: machinesTable,
		},
		"machines list with filters": {
			args:   []string{"machines", "list", "--state", "ready", "--owner=alice", "-agent-name", "j 1"},
			routes: map[string]answer{"GET /api/v1/machines": {200, "[]"}},
			want:   []seen{{Method: "GET", Path: "/api/v1/machines", Query: "agent_name=j+1&owner=alice&state=READY"}},
			stdout: "ID  HOSTNAME  STATE  ARCH  CPU  MEM  OWNER  AGENT  TAGS\n",
		},
		"machines list --json keeps unknown fields": {
			args:   []string{"machines", "list", "--json"},
			routes: map[string]answer{"GET /api/v1/machines": list},
			want:   []seen{{Method: "GET", Path: "/api/v1/machines"}},
			stdout: indent(t, "["+machine1+","+machine2+"]"),
		},
		"global flags before the verb": {
			args:   []string{"--json", "--token", "other", "machines", "list"},
			routes: map[string]answer{"GET /api/v1/machines": list},
			want:   []seen{{Method: "GET", Path: "/api/v1/machines", Auth: "Bearer other"}},
			stdout: indent(t, "["+machine1+","+machine2+"]"),
		},
		"--url and --token after the verb override the environment": {
			args:   []string{"machines", "list", "--token", "flagtok", "--url", "URL"},
			env:    map[string]string{"RACKD_URL": "http://127.0.0.1:1"},
			routes: map[string]answer{"GET /api/v1/machines": list},
			want:   []seen{{Method: "GET", Path: "/api/v1/machines", Auth: "Bearer flagtok"}},
			stdout: machinesTable,
		},
		"machines show with events": {
			args: []string{"machines", "show", "web1"},
			routes: map[string]answer{
				"GET /api/v1/machines/web1":       one,
				"GET /api/v1/machines/m-1/events": {200, events1},
			},
			want: []seen{{Method: "GET", Path: "/api/v1/machines/web1"}, {Method: "GET", Path: "/api/v1/machines/m-1/events"}},
			contains: []string{
				"Hostname:    web1\n",
				"State:       READY since 2025-01-02T03:04:05Z\n",
				"Memory:      16G\n",
				"IPs:         10.0.0.5 (sticky on aa:bb:cc:dd:ee:01)\n",
				"Power:       ipmi, desired off, observed off\n",
				"\nEvents:\nTIME                  ACTOR  ACTION      FROM  TO             REASON\n",
				"2025-01-01T00:00:00Z  admin  create      -     NEW            -\n",
				// Control characters from the server never reach the terminal.
				"2025-01-02T03:04:05Z  admin  commission  NEW   COMMISSIONING  new?disk?[31m\n",
			},
		},
		"machines show --json after the argument": {
			args:   []string{"machines", "show", "web1", "--json"},
			routes: map[string]answer{"GET /api/v1/machines/web1": one},
			want:   []seen{{Method: "GET", Path: "/api/v1/machines/web1"}},
			stdout: indent(t, machine1),
		},
		"machines show after --": {
			args:   []string{"machines", "show", "--json", "--", "-odd"},
			routes: map[string]answer{"GET /api/v1/machines/-odd": one},
			want:   []seen{{Method: "GET", Path: "/api/v1/machines/-odd"}},
			stdout: indent(t, machine1),
		},
		"machines show events fail": {
			args:   []string{"machines", "show", "web1"},
			routes: map[string]answer{"GET /api/v1/machines/web1": one},
			want:   []seen{{Method: "GET", Path: "/api/v1/machines/web1"}, {Method: "GET", Path: "/api/v1/machines/m-1/events"}},
			code:   1, contains: []string{"Hostname:    web1\n"},
			errContains: []string{"rackd: listing the events of web1: no route in the fake (not_found, HTTP 404)\n"},
		},
		"machines events --json": {
			args:   []string{"machines", "events", "web1", "--json"},
			routes: map[string]answer{"GET /api/v1/machines/web1/events": {200, events1}},
			want:   []seen{{Method: "GET", Path: "/api/v1/machines/web1/events"}},
			stdout: indent(t, events1),
		},
		"machines add": {
			args: []string{"machines", "add", "--hostname", "web1", "--arch", "amd64", "--mac", "aa:bb:cc:dd:ee:01",
				"--mac", "aa:bb:cc:dd:ee:02", "--cpu", "8", "--memory-mb", "16384", "--tag", "ssd", "--tag", "big",
				"--zone", "z1", "--state", "ready", "--power-driver", "ipmi", "--power-address", "10.0.0.9:623",
				"--power-user", "root"},
			env:    map[string]string{"RACKD_POWER_PASSWORD": "from-env"},
			routes: map[string]answer{"POST /api/v1/machines": {201, machine1}},
			want: []seen{{Method: "POST", Path: "/api/v1/machines", Body: `{"hostname":"web1","arch":"amd64",
				"macs":["aa:bb:cc:dd:ee:01","aa:bb:cc:dd:ee:02"],"power":{"driver":"ipmi","address":"10.0.0.9:623",
				"username":"root","password":"from-env"},"cpu_count":8,"memory_mb":16384,"tags":["ssd","big"],
				"zone":"z1","state":"READY"}`}},
			stdout: web1Row,
		},
		"machines add password flag wins over env": {
			args: []string{"machines", "add", "--hostname=web1", "--arch=amd64", "--mac=aa:bb:cc:dd:ee:01",
				"--power-driver=ipmi", "--power-password=pw", "--json"},
			env:    map[string]string{"RACKD_POWER_PASSWORD": "from-env"},
			routes: map[string]answer{"POST /api/v1/machines": {201, machine1}},
			want: []seen{{Method: "POST", Path: "/api/v1/machines", Body: `{"hostname":"web1","arch":"amd64",
				"macs":["aa:bb:cc:dd:ee:01"],"power":{"driver":"ipmi","password":"pw"},"cpu_count":0,"memory_mb":0}`}},
			stdout: indent(t, machine1),
		},
		"machines add without power ignores the password env": {
			args:   []string{"machines", "add", "--hostname=web1", "--arch=amd64", "--mac=aa:bb:cc:dd:ee:01"},
			env:    map[string]string{"RACKD_POWER_PASSWORD": "from-env"},
			routes: map[string]answer{"POST /api/v1/machines": {201, machine1}},
			want: []seen{{Method: "POST", Path: "/api/v1/machines", Body: `{"hostname":"web1","arch":"amd64",
				"macs":["aa:bb:cc:dd:ee:01"],"cpu_count":0,"memory_mb":0}`}},
			stdout: web1Row,
		},
		"machines add conflict": {
			args:        []string{"machines", "add", "--hostname=web1", "--arch=amd64", "--mac=aa:bb:cc:dd:ee:01"},
			routes:      map[string]answer{"POST /api/v1/machines": {409, `{"error":"hostname \"web1\" is taken","code":"conflict"}`}},
			want:        []seen{{Method: "POST", Path: "/api/v1/machines", Body: `{"hostname":"web1","arch":"amd64","macs":["aa:bb:cc:dd:ee:01"],"cpu_count":0,"memory_mb":0}`}},
			code:        1,
			errContains: []string{"rackd: hostname \"web1\" is taken (conflict, HTTP 409)\n"},
		},
		"commission with reason": {
			args:   []string{"machines", "commission", "web1", "--reason", "new disks"},
			routes: map[string]answer{"POST /api/v1/machines/web1/commission": one},
			want:   []seen{{Method: "POST", Path: "/api/v1/machines/web1/commission", Body: `{"reason":"new disks"}`}},
			stdout: web1Row,
		},
		"deploy with image": {
			args:   []string{"machines", "deploy", "--image", "noble", "web1", "--json"},
			routes: map[string]answer{"POST /api/v1/machines/web1/deploy": one},
			want:   []seen{{Method: "POST", Path: "/api/v1/machines/web1/deploy", Body: `{"image":"noble"}`}},
			stdout: indent(t, machine1),
		},
		"every other action": {
			args: []string{"machines", "mark-broken", "web1"},
			routes: map[string]answer{"POST /api/v1/machines/web1/mark-broken": one,
				"POST /api/v1/machines/web1/mark-fixed": one, "POST /api/v1/machines/web1/retire": one,
				"POST /api/v1/machines/web1/release": one},
			want:   []seen{{Method: "POST", Path: "/api/v1/machines/web1/mark-broken", Body: `{}`}},
			stdout: web1Row,
		},
		"invalid transition": {
			args: []string{"machines", "retire", "web1"},
			routes: map[string]answer{"POST /api/v1/machines/web1/retire": {409,
				`{"error":"cannot retire a machine that is DEPLOYED: DEPLOYED -> RETIRED is not allowed","code":"invalid_transition"}`}},
			want:        []seen{{Method: "POST", Path: "/api/v1/machines/web1/retire", Body: `{}`}},
			code:        1,
			errContains: []string{"rackd: cannot retire a machine that is DEPLOYED: DEPLOYED -> RETIRED is not allowed (invalid_transition, HTTP 409)\n"},
		},
		"allocate by constraints": {
			args:   []string{"allocate", "--agent-name", "j1", "--arch", "amd64", "--min-cpu", "4", "--min-memory-mb", "8192", "--tag", "ssd", "--zone", "z1"},
			routes: map[string]answer{"POST /api/v1/allocations": {201, `{"machine":` + machine2 + `,"token":"alloc-tok"}`}},
			want: []seen{{Method: "POST", Path: "/api/v1/allocations", Body: `{"agent_name":"j1","constraints":
				{"arch":"amd64","min_cpu":4,"min_memory_mb":8192,"tags":["ssd"],"zone":"z1"}}`}},
			contains: []string{"Allocated db1 as agent \"j1\".\n", "m-2  db1", "\nAllocation token: alloc-tok\n", "shown once"},
		},
		"allocate by name unchanged": {
			args:     []string{"allocate", "--name", "db1", "--agent-name", "j1"},
			routes:   map[string]answer{"POST /api/v1/allocations": {200, `{"machine":` + machine2 + `}`}},
			want:     []seen{{Method: "POST", Path: "/api/v1/allocations", Body: `{"name":"db1","agent_name":"j1"}`}},
			contains: []string{"db1 is already allocated to you as agent \"j1\"; nothing changed.\n"},
		},
		"allocate adopt: --token is the allocation's, --api-token the API's": {
			args:   []string{"allocate", "--name", "db1", "--agent-name", "j2", "--token", "old-alloc", "--api-token", "bob"},
			routes: map[string]answer{"POST /api/v1/allocations": {200, `{"machine":` + machine2 + `,"token":"new-alloc"}`}},
			want: []seen{{Method: "POST", Path: "/api/v1/allocations", Auth: "Bearer bob",
				Body: `{"name":"db1","agent_name":"j2","token":"old-alloc"}`}},
			contains: []string{"Adopted db1", "the old allocation token no longer works", "Allocation token: new-alloc\n"},
		},
		"allocate --json": {
			args:   []string{"allocate", "--json"},
			routes: map[string]answer{"POST /api/v1/allocations": {201, `{"machine":` + machine2 + `,"token":"alloc-tok"}`}},
			want:   []seen{{Method: "POST", Path: "/api/v1/allocations", Body: `{}`}},
			stdout: indent(t, `{"machine":`+machine2+`,"token":"alloc-tok"}`),
		},
		"allocate nothing available": {
			args:        []string{"allocate", "--arch", "s390x"},
			routes:      map[string]answer{"POST /api/v1/allocations": {409, `{"error":"no READY machine matches","code":"no_available_machine"}`}},
			want:        []seen{{Method: "POST", Path: "/api/v1/allocations", Body: `{"constraints":{"arch":"s390x"}}`}},
			code:        1,
			errContains: []string{"rackd: no READY machine matches (no_available_machine, HTTP 409)\n"},
		},
		"release": {
			args:   []string{"release", "web1"},
			routes: map[string]answer{"DELETE /api/v1/allocations/web1": one},
			want:   []seen{{Method: "DELETE", Path: "/api/v1/allocations/web1"}},
			stdout: web1Row,
		},
		"users add": {
			args:     []string{"users", "add", "bob", "--admin"},
			routes:   map[string]answer{"POST /api/v1/users": {201, `{"name":"bob","admin":true,"token":"bobtok","created":"2025-01-01T00:00:00Z"}`}},
			want:     []seen{{Method: "POST", Path: "/api/v1/users", Body: `{"name":"bob","admin":true}`}},
			contains: []string{"Created admin user bob.\n", "Token: bobtok\n", "shown once"},
		},
		"users add --json": {
			args:   []string{"users", "add", "carol", "--json"},
			routes: map[string]answer{"POST /api/v1/users": {201, `{"name":"carol","admin":false,"token":"ct","created":"2025-01-01T00:00:00Z"}`}},
			want:   []seen{{Method: "POST", Path: "/api/v1/users", Body: `{"name":"carol"}`}},
			stdout: indent(t, `{"name":"carol","admin":false,"token":"ct","created":"2025-01-01T00:00:00Z"}`),
		},
		"users add forbidden": {
			args:        []string{"users", "add", "eve"},
			routes:      map[string]answer{"POST /api/v1/users": {403, `{"error":"admin only","code":"forbidden"}`}},
			want:        []seen{{Method: "POST", Path: "/api/v1/users", Body: `{"name":"eve"}`}},
			code:        1,
			errContains: []string{"rackd: admin only (forbidden, HTTP 403)\n"},
		},
		"users list": {
			args:   []string{"users", "list"},
			routes: map[string]answer{"GET /api/v1/users": {200, `[{"name":"admin","admin":true,"created":"2025-01-01T00:00:00Z"},{"name":"bob","admin":false,"created":"2025-01-02T00:00:00Z"}]`}},
			want:   []seen{{Method: "GET", Path: "/api/v1/users"}},
			stdout: "NAME   ADMIN  CREATED\nadmin  yes    2025-01-01T00:00:00Z\nbob    no     2025-01-02T00:00:00Z\n",
		},
		"unauthorized": {
			args:        []string{"users", "list"},
			routes:      map[string]answer{"GET /api/v1/users": {401, `{"error":"missing or unknown token","code":"unauthorized"}`}},
			want:        []seen{{Method: "GET", Path: "/api/v1/users"}},
			code:        1,
			errContains: []string{"rackd: missing or unknown token (unauthorized, HTTP 401)\n"},
		},
		"version": {
			args:   []string{"version"},
			routes: map[string]answer{"GET /api/v1/version": {200, `{"version":"1.2.3","schema":4}`}},
			want:   []seen{{Method: "GET", Path: "/api/v1/version"}},
			stdout: "client: dev\nserver: 1.2.3 (schema 4) at URL\n",
		},
		"version --json": {
			args:   []string{"version", "--json"},
			routes: map[string]answer{"GET /api/v1/version": {200, `{"version":"1.2.3","schema":4}`}},
			want:   []seen{{Method: "GET", Path: "/api/v1/version"}},
			stdout: indent(t, `{"client":{"version":"dev"},"url":"URL","server":{"version":"1.2.3","schema":4}}`),
		},
		"version without a token asks /healthz": {
			args:   []string{"version"},
			env:    map[string]string{"RACKD_TOKEN": ""},
			routes: map[string]answer{"GET /healthz": {200, `{"status":"ok","version":"1.2.3"}`}},
			want:   []seen{{Method: "GET", Path: "/healthz", Auth: "-"}},
			stdout: "client: dev\nserver: 1.2.3 (schema unknown: no API token) at URL\n",
		},
		"version with a refused token asks /healthz": {
			args: []string{"version"},
			routes: map[string]answer{"GET /api/v1/version": {401, `{"error":"bad token","code":"unauthorized"}`},
				"GET /healthz": {200, `{"status":"ok","version":"1.2.3"}`}},
			want:   []seen{{Method: "GET", Path: "/api/v1/version"}, {Method: "GET", Path: "/healthz"}},
			stdout: "client: dev\nserver: 1.2.3 (schema unknown: bad token (unauthorized, HTTP 401)) at URL\n",
		},
		"version with the server down": {
			args:        []string{"version", "--url", "http://127.0.0.1:1"},
			stdout:      "client: dev\n",
			errContains: []string{"rackd: server version unknown: cannot reach rackd at http://127.0.0.1:1: "},
		},
		"unreachable": {
			args:        []string{"machines", "list", "--url", "127.0.0.1:1"},
			code:        1,
			errContains: []string{"rackd: cannot reach rackd at http://127.0.0.1:1: ", "check RACKD_URL"},
		},
		"RACKD_URL": {
			args:        []string{"machines", "list"},
			env:         map[string]string{"RACKD_URL": "http://127.0.0.1:1/"},
			code:        1,
			errContains: []string{"rackd: cannot reach rackd at http://127.0.0.1:1: "},
		},
	})
}

func runVerbCases(t *testing.T, tests map[string]verbCase) {
	t.Helper()
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			isolate(t)
			f := newFake(t, tc.routes)
			t.Setenv("RACKD_URL", f.srv.URL)
			t.Setenv("RACKD_TOKEN", "tok")
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			args := make([]string, len(tc.args))
			for i, a := range tc.args {
				args[i] = strings.ReplaceAll(a, "URL", f.srv.URL)
			}
			code, stdout, stderr := run(t, args...)
			if code != tc.code {
				t.Errorf("exit code %d, want %d; stderr:\n%s", code, tc.code, stderr)
			}
			wantOut := strings.ReplaceAll(tc.stdout, "URL", f.srv.URL)
			if tc.stdout != "" && stdout != wantOut {
				t.Errorf("stdout:\n%s\nwant:\n%s", stdout, wantOut)
			}
			for _, s := range tc.contains {
				if !strings.Contains(stdout, s) {
					t.Errorf("stdout does not contain %q:\n%s", s, stdout)
				}
			}
			for _, s := range tc.errContains {
				if !strings.Contains(stderr, s) {
					t.Errorf("stderr does not contain %q:\n%s", s, stderr)
				}
			}
			if len(tc.errContains) == 0 && stderr != "" {
				t.Errorf("unexpected stderr:\n%s", stderr)
			}
			checkRequests(t, f.requests(), tc.want)
		})
	}
}

// checkRequests compares requests; bodies are compared as JSON, and an
// empty Auth in want means "Bearer tok", "-" means none.
func checkRequests(t *testing.T, got, want []seen) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d requests %+v, want %d %+v", len(got), got, len(want), want)
	}
	for i := range want {
		w, g := want[i], got[i]
		switch w.Auth {
		case "":
			w.Auth = "Bearer tok"
		case "-":
			w.Auth = ""
		}
		if w.Body != "" || g.Body != "" {
			var wb, gb any
			if err := json.Unmarshal([]byte(w.Body), &wb); err != nil {
				t.Fatalf("bad want body %q: %v", w.Body, err)
			}
			if err := json.Unmarshal([]byte(g.Body), &gb); err != nil || !reflect.DeepEqual(wb, gb) {
				t.Errorf("request %d body %s, want %s", i, g.Body, w.Body)
			}
		}
		w.Body, g.Body = "", ""
		if g != w {
			t.Errorf("request %d = %+v, want %+v", i, g, w)
		}
	}
}

// usageCase runs a command that must not reach the API.
type usageCase struct {
	args        []string
	code        int
	stdout      []string // substrings
	errContains []string
}

func TestUsage(t *testing.T) {
	runUsageCases(t, map[string]usageCase{
		"no arguments":       {args: nil, code: 2, errContains: []string{"Usage: rackd COMMAND"}},
		"help":               {args: []string{"help"}, stdout: []string{"Usage: rackd COMMAND", "machines list", "allocate", "backup FILE", "Exit status"}},
		"-h":                 {args: []string{"-h"}, stdout: []string{"Usage: rackd COMMAND"}},
		"--help":             {args: []string{"--help"}, stdout: []string{"Usage: rackd COMMAND"}},
		"machines -h":        {args: []string{"machines", "-h"}, stdout: []string{"Usage: rackd machines COMMAND", "mark-broken ID"}},
		"machines alone":     {args: []string{"machines"}, code: 2, errContains: []string{"Usage: rackd machines COMMAND"}},
		"machines add -h":    {args: []string{"machines", "add", "-h"}, stdout: []string{"Usage: rackd machines add --hostname H", "--power-password PASSWORD", "RACKD_POWER_PASSWORD"}},
		"help machines add":  {args: []string{"help", "machines", "add"}, stdout: []string{"Usage: rackd machines add"}},
		"help allocate":      {args: []string{"help", "allocate"}, stdout: []string{"Usage: rackd allocate", "--min-memory-mb N", "--token TOKEN", "--api-token"}},
		"help serve":         {args: []string{"help", "serve"}, stdout: []string{"Usage: rackd serve"}},
		"help bogus":         {args: []string{"help", "bogus"}, code: 2, errContains: []string{`unknown command "bogus"`}},
		"unknown command":    {args: []string{"bogus"}, code: 2, errContains: []string{`rackd: unknown command "bogus"`, "Usage: rackd COMMAND"}},
		"unknown global":     {args: []string{"--bogus", "machines", "list"}, code: 2, errContains: []string{"flag provided but not defined: -bogus"}},
		"unknown sub-verb":   {args: []string{"machines", "bogus"}, code: 2, errContains: []string{`rackd machines: unknown command "bogus"`}},
		"unknown power verb": {args: []string{"power", "reboot", "web1"}, code: 2, errContains: []string{`rackd power: unknown command "reboot"`}},
		"missing ID":         {args: []string{"machines", "show"}, code: 2, errContains: []string{"rackd machines show: missing ID\n", "Usage: rackd machines show ID"}},
		"extra argument":     {args: []string{"machines", "show", "a", "b"}, code: 2, errContains: []string{`rackd machines show: unexpected argument "b"`}},
		"empty ID":           {args: []string{"release", ""}, code: 2, errContains: []string{"rackd release: empty ID"}},
		"list takes no args": {args: []string{"machines", "list", "READY"}, code: 2, errContains: []string{`unexpected argument "READY"`}},
		"unknown flag":       {args: []string{"machines", "commission", "web1", "--image", "x"}, code: 2, errContains: []string{"rackd machines commission: flag provided but not defined: -image", "Usage: rackd machines commission ID [--force-bmc-setup] [--reason R]"}},
		"bad number":         {args: []string{"machines", "add", "--cpu", "many"}, code: 2, errContains: []string{`invalid value "many" for flag -cpu`}},
		"add without hostname": {args: []string{"machines", "add", "--arch", "amd64", "--mac", "aa:bb:cc:dd:ee:01"}, code: 2,
			errContains: []string{"--hostname is required", "Usage: rackd machines add"}},
		"add without mac":      {args: []string{"machines", "add", "--hostname", "h", "--arch", "amd64"}, code: 2, errContains: []string{"at least one --mac"}},
		"add bad state":        {args: []string{"machines", "add", "--hostname", "h", "--arch", "a", "--mac", "m", "--state", "BROKEN"}, code: 2, errContains: []string{"--state must be one of NEW, READY, DEPLOYED"}},
		"add power w/o driver": {args: []string{"machines", "add", "--hostname", "h", "--arch", "a", "--mac", "m", "--power-user", "root"}, code: 2, errContains: []string{"need --power-driver"}},
		"add negative cpu":     {args: []string{"machines", "add", "--hostname", "h", "--arch", "a", "--mac", "m", "--cpu", "-1"}, code: 2, errContains: []string{"--cpu must not be negative"}},
		"adopt without name":   {args: []string{"allocate", "--token", "t"}, code: 2, errContains: []string{"give --name too"}},
		"users add no name":    {args: []string{"users", "add", "--admin"}, code: 2, errContains: []string{"rackd users add: missing NAME"}},
		"backup no file":       {args: []string{"backup"}, code: 2, errContains: []string{"rackd backup: missing FILE"}},
		"bad url":              {args: []string{"machines", "list", "--url", "ftp://x"}, code: 2, errContains: []string{`invalid --url "ftp://x"`}},
		"serve without serve":  {args: []string{"serve"}, code: 2, errContains: []string{"not available"}},
	})
}

func runUsageCases(t *testing.T, tests map[string]usageCase) {
	t.Helper()
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			isolate(t)
			t.Setenv("RACKD_TOKEN", "tok")
			t.Setenv("RACKD_URL", "http://127.0.0.1:1") // nothing must be sent
			code, stdout, stderr := run(t, tc.args...)
			if code != tc.code {
				t.Errorf("exit code %d, want %d; stderr:\n%s", code, tc.code, stderr)
			}
			for _, s := range tc.stdout {
				if !strings.Contains(stdout, s) {
					t.Errorf("stdout does not contain %q:\n%s", s, stdout)
				}
			}
			for _, s := range tc.errContains {
				if !strings.Contains(stderr, s) {
					t.Errorf("stderr does not contain %q:\n%s", s, stderr)
				}
			}
			if tc.code == 0 && stderr != "" {
				t.Errorf("unexpected stderr:\n%s", stderr)
			}
			if tc.code != 0 && stdout != "" {
				t.Errorf("unexpected stdout:\n%s", stdout)
			}
		})
	}
}

type exitErr struct{ code int }

func (e exitErr) Error() string { return "bad serve flags" }
func (e exitErr) ExitCode() int { return e.code }

func TestServe(t *testing.T) {
	tests := map[string]struct {
		err     error
		code    int
		wantErr string
	}{
		"ok":          {},
		"help":        {err: flag.ErrHelp},
		"failure":     {err: errors.New("cannot listen"), code: 1, wantErr: "rackd: cannot listen\n"},
		"usage error": {err: exitErr{2}, code: 2, wantErr: "rackd: bad serve flags\n"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var gotArgs []string
			serve := func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
				gotArgs = args
				return tc.err
			}
			var out, errOut bytes.Buffer
			code := cli.Main(context.Background(), []string{"serve", "--listen", "127.0.0.1:0", "-h"}, &out, &errOut, serve)
			if code != tc.code || errOut.String() != tc.wantErr {
				t.Errorf("code %d stderr %q, want %d %q", code, errOut.String(), tc.code, tc.wantErr)
			}
			if want := []string{"--listen", "127.0.0.1:0", "-h"}; !reflect.DeepEqual(gotArgs, want) {
				t.Errorf("serve got %q, want %q", gotArgs, want)
			}
		})
	}
}

func TestVersionVar(t *testing.T) {
	isolate(t)
	old := cli.Version
	cli.Version = "1.0.0-test"
	t.Cleanup(func() { cli.Version = old })
	_, stdout, _ := run(t, "version", "--url", "http://127.0.0.1:1")
	if !strings.HasPrefix(stdout, "client: 1.0.0-test\n") {
		t.Errorf("stdout %q", stdout)
	}
}

func TestTokenFile(t *testing.T) {
	routes := map[string]answer{"GET /api/v1/users": {200, "[]"}}
	tests := map[string]struct {
		// setup prepares the environment in dir (the working directory) and
		// returns the path the error should name.
		setup   func(t *testing.T, dir string) string
		auth    string // expected Authorization, if the call goes through
		errWant string
	}{
		"RACKD_STATE_DIR": {
			setup: func(t *testing.T, dir string) string {
				state := filepath.Join(dir, "state")
				writeFile(t, filepath.Join(state, "admin.token"), "  statetok\n")
				writeFile(t, filepath.Join(dir, "var", "admin.token"), "localtok\n") // not used
				t.Setenv("RACKD_STATE_DIR", state)
				return ""
			},
			auth: "Bearer statetok",
		},
		"RACKD_STATE_DIR without the file": {
			setup: func(t *testing.T, dir string) string {
				writeFile(t, filepath.Join(dir, "var", "admin.token"), "localtok\n") // not used either
				t.Setenv("RACKD_STATE_DIR", filepath.Join(dir, "state"))
				return filepath.Join(dir, "state", "admin.token")
			},
		},
		"./var/admin.token of make run": {
			setup: func(t *testing.T, dir string) string {
				writeFile(t, filepath.Join(dir, "var", "admin.token"), "localtok\n")
				t.Setenv("RACKD_STATE_DIR", "")
				return ""
			},
			auth: "Bearer localtok",
		},
		"system file missing": {
			setup: func(t *testing.T, dir string) string {
				t.Setenv("RACKD_STATE_DIR", "")
				return filepath.Join(dir, "system", "admin.token")
			},
		},
		"system file": {
			setup: func(t *testing.T, dir string) string {
				writeFile(t, filepath.Join(dir, "system", "admin.token"), "systok\n")
				t.Setenv("RACKD_STATE_DIR", "")
				return ""
			},
			auth: "Bearer systok",
		},
		"empty file": {
			setup: func(t *testing.T, dir string) string {
				writeFile(t, filepath.Join(dir, "admin.token"), "\n")
				t.Setenv("RACKD_STATE_DIR", dir)
				return filepath.Join(dir, "admin.token") + " is empty"
			},
		},
		"RACKD_TOKEN beats the file": {
			setup: func(t *testing.T, dir string) string {
				writeFile(t, filepath.Join(dir, "admin.token"), "filetok\n")
				t.Setenv("RACKD_STATE_DIR", dir)
				t.Setenv("RACKD_TOKEN", "envtok")
				return ""
			},
			auth: "Bearer envtok",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			isolate(t)
			f := newFake(t, routes)
			t.Setenv("RACKD_URL", f.srv.URL)
			dir := t.TempDir()
			t.Chdir(dir)
			wantPath := tc.setup(t, dir)
			// The system file is the test's, never the host's own.
			var out, errOut bytes.Buffer
			code := cli.Main(context.Background(), []string{"users", "list"}, &out, &errOut, nil,
				cli.WithSystemTokenFile(filepath.Join(dir, "system", "admin.token")))
			stderr := errOut.String()
			if tc.auth != "" {
				if code != 0 {
					t.Fatalf("exit %d: %s", code, stderr)
				}
				checkRequests(t, f.requests(), []seen{{Method: "GET", Path: "/api/v1/users", Auth: tc.auth}})
				return
			}
			if code != 1 || !strings.Contains(stderr, "rackd: no API token") || !strings.Contains(stderr, wantPath) {
				t.Errorf("exit %d, stderr %q; want 1 and a message naming %s", code, stderr, wantPath)
			}
			if n := len(f.requests()); n != 0 {
				t.Errorf("%d requests sent without a token", n)
			}
		})
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
