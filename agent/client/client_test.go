package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"rackd/agent/client"
	"rackd/api"
)

// request is what the fake server saw.
type request struct {
	Method, Path, Query, Auth, ContentType string
	Body                                   string
}

// fake answers every request with status and body and records the request.
func fake(t *testing.T, status int, body string) (*httptest.Server, *request) {
	t.Helper()
	got := &request{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		*got = request{
			Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.RawQuery,
			Auth: r.Header.Get("Authorization"), ContentType: r.Header.Get("Content-Type"),
			Body: string(b),
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

const machineJSON = `{"id":"m-1","hostname":"web1","state":"READY","arch":"amd64","macs":["aa:bb:cc:dd:ee:01"],"owner":"","agent_name":"","cpu_count":8,"memory_mb":16384,"tags":["ssd"],"ips":[],"power":{"driver":"ipmi","desired":"off","observed":"off"}}`

func TestMethods(t *testing.T) {
	ctx := context.Background()
	tests := map[string]struct {
		status   int
		answer   string
		call     func(c *client.Client) (any, error)
		want     request
		wantBody string // JSON, compared after normalising
		wantOut  any
	}{
		"list machines with filters": {
			status: 200, answer: "[" + machineJSON + "]",
			call: func(c *client.Client) (any, error) {
				return c.ListMachines(ctx, client.MachineFilter{State: "READY", Owner: "alice", AgentName: "j 1"})
			},
			want: request{Method: "GET", Path: "/api/v1/machines", Query: "agent_name=j+1&owner=alice&state=READY"},
			wantOut: []api.Machine{{ID: "m-1", Hostname: "web1", State: "READY", Arch: "amd64",
				MACs: []string{"aa:bb:cc:dd:ee:01"}, CPUCount: 8, MemoryMB: 16384, Tags: []string{"ssd"}, IPs: []api.IP{},
				Power: api.PowerView{Driver: "ipmi", Desired: "off", Observed: "off"}}},
		},
		"list machines unfiltered": {
			status: 200, answer: "[]",
			call: func(c *client.Client) (any, error) { return c.ListMachines(ctx, client.MachineFilter{}) },
			want: request{Method: "GET", Path: "/api/v1/machines"}, wantOut: []api.Machine{},
		},
		"get machine escapes the name": {
			status: 200, answer: machineJSON,
			call: func(c *client.Client) (any, error) {
				m, err := c.GetMachine(ctx, "a/b?c")
				return m.Hostname, err
			},
			want: request{Method: "GET", Path: "/api/v1/machines/a%2Fb%3Fc"}, wantOut: "web1",
		},
		"create machine": {
			status: 201, answer: machineJSON,
			call: func(c *client.Client) (any, error) {
				m, err := c.CreateMachine(ctx, api.CreateMachine{Hostname: "web1", Arch: "amd64", MACs: []string{"aa:bb:cc:dd:ee:01"},
					Power: &api.PowerParams{Driver: "ipmi", Address: "10.0.0.9:623", Username: "root", Password: "pw"}, State: "READY"})
				return m.ID, err
			},
			want:     request{Method: "POST", Path: "/api/v1/machines", ContentType: "application/json"},
			wantBody: `{"hostname":"web1","arch":"amd64","macs":["aa:bb:cc:dd:ee:01"],"power":{"driver":"ipmi","address":"10.0.0.9:623","username":"root","password":"pw"},"cpu_count":0,"memory_mb":0,"state":"READY"}`,
			wantOut:  "m-1",
		},
		"deploy": {
			status: 200, answer: machineJSON,
			call: func(c *client.Client) (any, error) {
				m, err := c.MachineAction(ctx, "web1", "deploy", api.ActionRequest{Image: "noble", Reason: "go"})
				return m.ID, err
			},
			want:     request{Method: "POST", Path: "/api/v1/machines/web1/deploy", ContentType: "application/json"},
			wantBody: `{"reason":"go","image":"noble"}`, wantOut: "m-1",
		},
		"events": {
			status: 200, answer: `[{"seq":1,"time":"2025-01-02T03:04:05Z","machine":"m-1","actor":"admin","action":"commission","from":"NEW","to":"COMMISSIONING"}]`,
			call: func(c *client.Client) (any, error) { return c.MachineEvents(ctx, "web1") },
			want: request{Method: "GET", Path: "/api/v1/machines/web1/events"},
			wantOut: []api.Event{{Seq: 1, Time: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), Machine: "m-1", Actor: "admin",
				Action: "commission", From: "NEW", To: "COMMISSIONING"}},
		},
		"allocate new": {
			status: 201, answer: `{"machine":` + machineJSON + `,"token":"tok"}`,
			call: func(c *client.Client) (any, error) {
				a, status, err := c.Allocate(ctx, api.AllocateRequest{AgentName: "j1", Constraints: &api.Constraints{Arch: "amd64", MinCPU: 4}})
				return []any{a.Machine.ID, a.Token, status}, err
			},
			want:     request{Method: "POST", Path: "/api/v1/allocations", ContentType: "application/json"},
			wantBody: `{"agent_name":"j1","constraints":{"arch":"amd64","min_cpu":4}}`,
			wantOut:  []any{"m-1", "tok", 201},
		},
		"allocate unchanged": {
			status: 200, answer: `{"machine":` + machineJSON + `}`,
			call: func(c *client.Client) (any, error) {
				a, status, err := c.Allocate(ctx, api.AllocateRequest{Name: "web1", AgentName: "j1"})
				return []any{a.Token, status}, err
			},
			want:     request{Method: "POST", Path: "/api/v1/allocations", ContentType: "application/json"},
			wantBody: `{"name":"web1","agent_name":"j1"}`,
			wantOut:  []any{"", 200},
		},
		"release": {
			status: 200, answer: machineJSON,
			call: func(c *client.Client) (any, error) {
				m, err := c.Release(ctx, "web1")
				return m.ID, err
			},
			want: request{Method: "DELETE", Path: "/api/v1/allocations/web1"}, wantOut: "m-1",
		},
		"create user": {
			status: 201, answer: `{"name":"bob","admin":true,"token":"t0k","created":"2025-01-02T03:04:05Z"}`,
			call: func(c *client.Client) (any, error) {
				u, err := c.CreateUser(ctx, api.CreateUser{Name: "bob", Admin: true})
				return u.Token, err
			},
			want:     request{Method: "POST", Path: "/api/v1/users", ContentType: "application/json"},
			wantBody: `{"name":"bob","admin":true}`, wantOut: "t0k",
		},
		"list users": {
			status: 200, answer: `[{"name":"admin","admin":true,"created":"2025-01-02T03:04:05Z"}]`,
			call: func(c *client.Client) (any, error) { return c.ListUsers(ctx) },
			want: request{Method: "GET", Path: "/api/v1/users"},
			wantOut: []api.User{{Name: "admin", Admin: true,
				Created: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}},
		},
		"list subnets": {
			status: 200, answer: `[{"cidr":"10.0.0.0/24","gateway":"10.0.0.1","lease_seconds":3600,"dynamic_ranges":[{"start":"10.0.0.100","end":"10.0.0.199"}],"dynamic_size":100,"dynamic_used":7,"created":"2025-01-02T03:04:05Z"}]`,
			call: func(c *client.Client) (any, error) { return c.ListSubnets(ctx) },
			want: request{Method: "GET", Path: "/api/v1/subnets"},
			wantOut: []api.Subnet{{CIDR: "10.0.0.0/24", Gateway: "10.0.0.1", LeaseSeconds: 3600,
				DynamicRanges: []api.Range{{Start: "10.0.0.100", End: "10.0.0.199"}}, DynamicSize: 100, DynamicUsed: 7,
				Created: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}},
		},
		"create subnet": {
			status: 201, answer: `{"cidr":"10.0.0.0/24","domain":"lab"}`,
			call: func(c *client.Client) (any, error) {
				return c.CreateSubnet(ctx, api.Subnet{CIDR: "10.0.0.0/24", Gateway: "10.0.0.1", DNSServers: []string{"10.0.0.2"},
					Domain: "lab", LeaseSeconds: 600, DynamicRanges: []api.Range{{Start: "10.0.0.100", End: "10.0.0.199"}},
					ReservedRanges: []api.Range{{Start: "10.0.0.2", End: "10.0.0.9"}}})
			},
			want: request{Method: "POST", Path: "/api/v1/subnets", ContentType: "application/json"},
			wantBody: `{"cidr":"10.0.0.0/24","gateway":"10.0.0.1","dns_servers":["10.0.0.2"],"domain":"lab","lease_seconds":600,
				"dynamic_ranges":[{"start":"10.0.0.100","end":"10.0.0.199"}],"reserved_ranges":[{"start":"10.0.0.2","end":"10.0.0.9"}]}`,
			wantOut: api.Subnet{CIDR: "10.0.0.0/24", Domain: "lab"},
		},
		"list addresses of a kind": {
			status: 200, answer: `[{"ip":"10.0.0.5","subnet":"10.0.0.0/24","kind":"reserved","mac":"aa:bb:cc:dd:ee:01","owner":"admin"}]`,
			call: func(c *client.Client) (any, error) { return c.ListAddresses(ctx, "reserved") },
			want: request{Method: "GET", Path: "/api/v1/ips", Query: "kind=reserved"},
			wantOut: []api.Address{{IP: "10.0.0.5", Subnet: "10.0.0.0/24", Kind: "reserved", MAC: "aa:bb:cc:dd:ee:01",
				Owner: "admin"}},
		},
		"list every address": {
			status: 200, answer: `[]`,
			call: func(c *client.Client) (any, error) { return c.ListAddresses(ctx, "") },
			want: request{Method: "GET", Path: "/api/v1/ips"}, wantOut: []api.Address{},
		},
		"reserve": {
			status: 201, answer: `{"ip":"10.0.0.10","subnet":"10.0.0.0/24","kind":"reserved","hostname":"sw1"}`,
			call: func(c *client.Client) (any, error) {
				a, err := c.Reserve(ctx, api.ReserveRequest{Subnet: "10.0.0.0/24", MAC: "aa:bb:cc:dd:ee:99", Hostname: "sw1", Purpose: "switch"})
				return a.IP, err
			},
			want:     request{Method: "POST", Path: "/api/v1/ips/reservations", ContentType: "application/json"},
			wantBody: `{"subnet":"10.0.0.0/24","mac":"aa:bb:cc:dd:ee:99","hostname":"sw1","purpose":"switch"}`,
			wantOut:  "10.0.0.10",
		},
		"unreserve": {
			status: 200, answer: `{"ip":"10.0.0.10","subnet":"10.0.0.0/24","kind":"reserved"}`,
			call: func(c *client.Client) (any, error) {
				a, err := c.Unreserve(ctx, "10.0.0.10")
				return a.IP, err
			},
			want: request{Method: "DELETE", Path: "/api/v1/ips/reservations/10.0.0.10"}, wantOut: "10.0.0.10",
		},
		"unreserve escapes the address": {
			status: 200, answer: `{"ip":"fe80::1","kind":"reserved"}`,
			call: func(c *client.Client) (any, error) {
				a, err := c.Unreserve(ctx, "fe80::1%eth0/x")
				return a.IP, err
			},
			want: request{Method: "DELETE", Path: "/api/v1/ips/reservations/fe80::1%25eth0%2Fx"}, wantOut: "fe80::1",
		},
		"assign ip": {
			status: 201, answer: `{"ip":"10.0.0.20","subnet":"10.0.0.0/24","kind":"sticky","mac":"aa:bb:cc:dd:ee:01","machine":"m-1"}`,
			call: func(c *client.Client) (any, error) {
				return c.AssignIP(ctx, "web 1", api.AssignIP{MAC: "aa:bb:cc:dd:ee:01", IP: "10.0.0.20", Alias: true, Reason: "vip"})
			},
			want:     request{Method: "POST", Path: "/api/v1/machines/web%201/ips", ContentType: "application/json"},
			wantBody: `{"mac":"aa:bb:cc:dd:ee:01","ip":"10.0.0.20","alias":true,"reason":"vip"}`,
			wantOut: api.Address{IP: "10.0.0.20", Subnet: "10.0.0.0/24", Kind: "sticky", MAC: "aa:bb:cc:dd:ee:01",
				Machine: "m-1"},
		},
		"remove ip": {
			status: 200, answer: `{"ip":"10.0.0.20","subnet":"10.0.0.0/24","kind":"sticky"}`,
			call: func(c *client.Client) (any, error) {
				a, err := c.RemoveIP(ctx, "a/b", "2001:db8::20")
				return a.IP, err
			},
			want: request{Method: "DELETE", Path: "/api/v1/machines/a%2Fb/ips/2001:db8::20"}, wantOut: "10.0.0.20",
		},
		"leases": {
			status: 200, answer: `[{"ip":"10.0.0.100","mac":"aa:bb:cc:dd:ee:02","hostname":"","expires":"2025-01-02T04:04:05Z","subnet":"10.0.0.0/24"}]`,
			call: func(c *client.Client) (any, error) { return c.ListLeases(ctx) },
			want: request{Method: "GET", Path: "/api/v1/leases"},
			wantOut: []api.Lease{{IP: "10.0.0.100", MAC: "aa:bb:cc:dd:ee:02",
				Expires: time.Date(2025, 1, 2, 4, 4, 5, 0, time.UTC), Subnet: "10.0.0.0/24"}},
		},
		"version": {
			status: 200, answer: `{"version":"1.2.3","schema":4}`,
			call: func(c *client.Client) (any, error) { return c.Version(ctx) },
			want: request{Method: "GET", Path: "/api/v1/version"}, wantOut: api.Version{Version: "1.2.3", Schema: 4},
		},
		"health": {
			status: 200, answer: `{"status":"ok","version":"1.2.3"}`,
			call: func(c *client.Client) (any, error) { return c.Health(ctx) },
			want: request{Method: "GET", Path: "/healthz"}, wantOut: api.Health{Status: "ok", Version: "1.2.3"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			srv, got := fake(t, tc.status, tc.answer)
			c := client.New(srv.URL+"/", "secret")
			out, err := tc.call(c)
			if err != nil {
				t.Fatalf("call: %v", err)
			}
			body := got.Body
			got.Body = ""
			want := tc.want
			want.Auth = "Bearer secret"
			if *got != want {
				t.Errorf("request = %+v, want %+v", *got, want)
			}
			if tc.wantBody != "" {
				if !jsonEqual(t, body, tc.wantBody) {
					t.Errorf("body = %s, want %s", body, tc.wantBody)
				}
			} else if body != "" {
				t.Errorf("unexpected body %q", body)
			}
			if !reflect.DeepEqual(out, tc.wantOut) {
				t.Errorf("out = %#v, want %#v", out, tc.wantOut)
			}
		})
	}
}

func jsonEqual(t *testing.T, a, b string) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal([]byte(a), &x); err != nil {
		t.Fatalf("bad JSON %q: %v", a, err)
	}
	if err := json.Unmarshal([]byte(b), &y); err != nil {
		t.Fatalf("bad JSON %q: %v", b, err)
	}
	return reflect.DeepEqual(x, y)
}

func TestNoTokenSendsNoAuthorization(t *testing.T) {
	srv, got := fake(t, 200, `{"status":"ok","version":"x"}`)
	if _, err := client.New(srv.URL, "").Health(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got.Auth != "" {
		t.Errorf("Authorization = %q, want none", got.Auth)
	}
}

func TestAPIError(t *testing.T) {
	tests := map[string]struct {
		status      int
		contentType string
		body        string
		want        client.APIError
		wantText    string
	}{
		"api error body": {
			status: 404, contentType: "application/json", body: `{"error":"machine \"x\" not found","code":"not_found"}`,
			want:     client.APIError{Status: 404, Code: "not_found", Message: `machine "x" not found`},
			wantText: `machine "x" not found (not_found, HTTP 404)`,
		},
		"unhealthy": {
			status: 503, contentType: "application/json", body: `{"status":"database unavailable: closed","version":"1"}`,
			want:     client.APIError{Status: 503, Message: "database unavailable: closed"},
			wantText: "database unavailable: closed (HTTP 503)",
		},
		"plain text from a proxy": {
			status: 502, contentType: "text/plain; charset=utf-8", body: "upstream down\nmore",
			want:     client.APIError{Status: 502, Message: "upstream down"},
			wantText: "upstream down (HTTP 502)",
		},
		"html page": {
			status: 503, contentType: "text/html", body: "<html>busy</html>",
			want:     client.APIError{Status: 503},
			wantText: "service unavailable (HTTP 503)",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tc.contentType)
				w.WriteHeader(tc.status)
				io.WriteString(w, tc.body)
			}))
			defer srv.Close()
			_, err := client.New(srv.URL, "t").GetMachine(context.Background(), "x")
			var ae *client.APIError
			if !errors.As(err, &ae) {
				t.Fatalf("err = %v (%T), want *APIError", err, err)
			}
			if *ae != tc.want {
				t.Errorf("APIError = %+v, want %+v", *ae, tc.want)
			}
			if err.Error() != tc.wantText {
				t.Errorf("Error() = %q, want %q", err.Error(), tc.wantText)
			}
			if tc.want.Code != "" && !client.IsCode(err, tc.want.Code) {
				t.Errorf("IsCode(%q) = false", tc.want.Code)
			}
		})
	}
}

func TestUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there any more
	_, err := client.New(url, "t").ListMachines(context.Background(), client.MachineFilter{})
	if err == nil {
		t.Fatal("no error")
	}
	if !strings.Contains(err.Error(), "cannot reach rackd at "+url+": ") || !strings.Contains(err.Error(), "RACKD_URL") {
		t.Errorf("error %q does not name the URL and RACKD_URL", err)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("error %q does not wrap ECONNREFUSED", err)
	}
}

func TestCancelledIsNotUnreachable(t *testing.T) {
	srv, _ := fake(t, 200, "[]")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := client.New(srv.URL, "t").ListUsers(ctx)
	if !errors.Is(err, context.Canceled) || strings.Contains(err.Error(), "cannot reach") {
		t.Errorf("err = %v, want a plain cancellation", err)
	}
}

func TestTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	start := time.Now()
	_, err := client.New(srv.URL, "t", client.WithTimeout(50*time.Millisecond)).Version(context.Background())
	if err == nil || !strings.Contains(err.Error(), "cannot reach rackd") {
		t.Errorf("err = %v, want a timeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
}

func TestNotRackd(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "<html>hello</html>")
	}))
	defer srv.Close()
	_, err := client.New(srv.URL, "t").ListMachines(context.Background(), client.MachineFilter{})
	if err == nil || !strings.Contains(err.Error(), "is this rackd?") {
		t.Errorf("err = %v", err)
	}
}

func TestBadIDAndAction(t *testing.T) {
	srv, got := fake(t, 200, machineJSON)
	c := client.New(srv.URL, "t")
	ctx := context.Background()
	for _, id := range []string{"", ".", ".."} {
		if _, err := c.GetMachine(ctx, id); err == nil {
			t.Errorf("GetMachine(%q): no error", id)
		}
		if _, err := c.Release(ctx, id); err == nil {
			t.Errorf("Release(%q): no error", id)
		}
	}
	if _, err := c.MachineAction(ctx, "web1", "power", api.ActionRequest{}); err == nil {
		t.Error("MachineAction(power): no error")
	}
	for _, ip := range []string{"", ".", ".."} {
		if _, err := c.Unreserve(ctx, ip); err == nil || !strings.Contains(err.Error(), "invalid IP address") {
			t.Errorf("Unreserve(%q): err = %v", ip, err)
		}
		if _, err := c.RemoveIP(ctx, "web1", ip); err == nil || !strings.Contains(err.Error(), "invalid IP address") {
			t.Errorf("RemoveIP(web1, %q): err = %v", ip, err)
		}
		if _, err := c.RemoveIP(ctx, ip, "10.0.0.1"); err == nil || !strings.Contains(err.Error(), "invalid machine id") {
			t.Errorf("RemoveIP(%q, 10.0.0.1): err = %v", ip, err)
		}
		if _, err := c.AssignIP(ctx, ip, api.AssignIP{MAC: "m"}); err == nil {
			t.Errorf("AssignIP(%q): no error", ip)
		}
	}
	if got.Method != "" {
		t.Errorf("a request was sent: %+v", *got)
	}
}

func TestCaptureRaw(t *testing.T) {
	answer := `{"id":"m-1","hostname":"web1","future_field":{"x":1}}`
	srv, _ := fake(t, 200, answer)
	var raw json.RawMessage
	m, err := client.New(srv.URL, "t").GetMachine(client.CaptureRaw(context.Background(), &raw), "web1")
	if err != nil {
		t.Fatal(err)
	}
	if m.Hostname != "web1" || string(raw) != answer {
		t.Errorf("hostname %q raw %s", m.Hostname, raw)
	}
}

func TestBackup(t *testing.T) {
	data := bytes.Repeat([]byte("bolt"), 50000)
	tests := map[string]struct {
		handler http.HandlerFunc
		wantErr string
	}{
		"ok": {handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Write(data)
		}},
		"broken off mid-stream": {handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Length", "1000000")
			w.Write(data[:1000])
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}, wantErr: "broke off after"},
		"chunked then aborted": {handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Write(data[:1000])
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}, wantErr: "broke off after"},
		"not octet-stream": {handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			io.WriteString(w, "<html>")
		}, wantErr: "unexpected content type"},
		"empty": {handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/octet-stream")
		}, wantErr: "empty body"},
		"forbidden": {handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(403)
			io.WriteString(w, `{"error":"admin only","code":"forbidden"}`)
		}, wantErr: "admin only (forbidden, HTTP 403)"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var gotPath, gotAuth string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				gotPath, gotAuth = r.URL.Path, r.Header.Get("Authorization")
				tc.handler(w, r)
			}))
			defer srv.Close()
			var buf bytes.Buffer
			// The call timeout must not apply to backups.
			n, err := client.New(srv.URL, "t", client.WithTimeout(time.Nanosecond)).Backup(context.Background(), &buf)
			if gotPath != "/api/v1/backup" || gotAuth != "Bearer t" {
				t.Errorf("request %s with %q", gotPath, gotAuth)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if n != int64(len(data)) || !bytes.Equal(buf.Bytes(), data) {
				t.Errorf("got %d bytes, want %d", n, len(data))
			}
		})
	}
}

func TestIPErrors(t *testing.T) {
	srv, got := fake(t, 409, `{"error":"10.0.0.5 is held by machine web1","code":"ip_in_use"}`)
	_, err := client.New(srv.URL, "t").Reserve(context.Background(), api.ReserveRequest{IP: "10.0.0.5"})
	if !client.IsCode(err, api.CodeIPInUse) || err.Error() != "10.0.0.5 is held by machine web1 (ip_in_use, HTTP 409)" {
		t.Errorf("err = %v", err)
	}
	if got.Method != "POST" || got.Path != "/api/v1/ips/reservations" || !jsonEqual(t, got.Body, `{"ip":"10.0.0.5"}`) {
		t.Errorf("request %+v", *got)
	}
}
