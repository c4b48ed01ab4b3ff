package main

import (
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rackd/api"
	"rackd/internal/ipmisim"
)

// consoleEnd bounds the wait for a console to end once its right is lost.
// It is a failure bound, not the promise (rackd ends it at the change,
// within a second or two): generous, for a loaded machine.
const consoleEnd = 10 * time.Second

// endedBy waits for c to end on its own (exit 1, "closed by rackd") and
// checks that rackd's last words name why.
func (c *consoleCLI) endedBy(t *testing.T, why string) {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(consoleEnd):
		t.Fatalf("rackd console is still attached %s after its right ended (want %q):\n%s%s", consoleEnd, why, c.out.String(), c.errOut.String())
	}
	want := "[rackd: the console ended: " + why + "]"
	if code := c.cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(c.out.String(), want) ||
		!strings.Contains(c.errOut.String(), "was closed by rackd") {
		t.Fatalf("rackd console: exit %d, want 1 and %q:\n%s%s", code, want, c.out.String(), c.errOut.String())
	}
}

// TestConsoleEndsWithItsRight: a console attached with `rackd console`
// through a real BMC (ipmi_sim) lasts only as long as the right that
// opened it. Revoking the token, its expiry, removing the user, another
// user adopting the machine and its release each end it promptly with a
// last line naming why; from then on what the user types reaches nothing.
// Before rackd held streams to their rights, every one of these consoles
// stayed attached, and typed, until the user detached.
func TestConsoleEndsWithItsRight(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for ipmi_sim (port 623); run as root or via make test")
	}
	if _, err := exec.LookPath("ipmi_sim"); err != nil {
		t.Skip("ipmi_sim not installed (scripts/test-deps.sh installs openipmi)")
	}
	serial := newSerialLine(t)
	sim := ipmisim.Start(t, ipmisim.Options{SOL: "tcp:" + serial.ln.Addr().String()})
	state := t.TempDir()
	config := filepath.Join(t.TempDir(), "rackd.toml")
	os.WriteFile(config, []byte(`
[power]
verify_interval = "200ms"
command_timeout = "5s"
min_interval = "0s"
`), 0o600)
	d := startDaemon(t, state, "--config", config)
	admin := []string{"RACKD_STATE_DIR=" + state, "RACKD_TOKEN="}
	mustCLI(t, d, admin, "machines", "add", "--hostname", "m1", "--mac", "52:54:00:0c:01:01", "--state", "READY",
		"--power-driver", "ipmi", "--power-address", sim.Addr, "--power-user", sim.User, "--power-password", sim.Password)
	user := func(name string, admin_ bool) []string {
		args := []string{"--json", "users", "add", name}
		if admin_ {
			args = append(args, "--admin")
		}
		var u api.User
		if err := json.Unmarshal([]byte(mustCLI(t, d, admin, args...)), &u); err != nil {
			t.Fatal(err)
		}
		return []string{"RACKD_TOKEN=" + u.Token}
	}
	token := func(as []string, name, expires string) (api.Token, []string) {
		args := []string{"--json", "tokens", "create", "--name", name}
		if expires != "" {
			args = append(args, "--expires", expires)
		}
		var tk api.Token
		if err := json.Unmarshal([]byte(mustCLI(t, d, as, args...)), &tk); err != nil {
			t.Fatal(err)
		}
		return tk, []string{"RACKD_TOKEN=" + tk.Token}
	}
	bob, alice := user("bob", false), user("alice", false)
	var alloc api.Allocation
	if err := json.Unmarshal([]byte(mustCLI(t, d, bob, "--json", "allocate", "--name", "m1")), &alloc); err != nil || alloc.Token == "" {
		t.Fatalf("bob allocates m1: %+v %v", alloc, err)
	}

	// The BMC connects to the serial line at the first SOL session and
	// keeps the line across sessions: what reaches it is read in order,
	// so whatever was typed after a console's end would show before the
	// next console's first typing.
	var g net.Conn
	top := t
	const afterEnd = "typed after the end"
	// attach has env's user attach for writing, shows that the guest's
	// output arrives and that typing reaches the guest (and that nothing
	// typed on an ended console did before), and returns the console.
	attach := func(t *testing.T, env []string, mark string) *consoleCLI {
		t.Helper()
		c := startConsoleCLI(t, d, env, "m1", "--write")
		if g == nil {
			select {
			case g = <-serial.conns:
				top.Cleanup(func() { g.Close() })
			case <-time.After(60 * time.Second):
				t.Fatal("the BMC never connected to the serial port (no SOL session)")
			}
		}
		printUntil(t, g, "guest: "+mark, func() bool { return strings.Contains(c.out.String(), "guest: "+mark) })
		io.WriteString(c.in, "typed "+mark+"\r")
		if got := readUntil(t, g, "typed "+mark+"\r"); strings.Contains(got, afterEnd) {
			t.Errorf("what was typed on an ended console reached the machine: %q", got)
		}
		return c
	}
	// ended checks that c ended for why; then the user types on, which
	// must reach nothing (checked by the next attach).
	ended := func(t *testing.T, c *consoleCLI, why string) {
		t.Helper()
		c.endedBy(t, why)
		io.WriteString(c.in, afterEnd+"\r") // the command has exited: it may fail
	}

	t.Run("token revoked", func(t *testing.T) {
		tk, env := token(bob, "console", "")
		c := attach(t, env, "before the revocation")
		mustCLI(t, d, admin, "tokens", "revoke", tk.ID)
		ended(t, c, "token "+tk.ID+" has been revoked")
	})
	t.Run("token expired", func(t *testing.T) {
		tk, env := token(bob, "brief", "8s")
		c := attach(t, env, "before the expiry")
		ended(t, c, "token "+tk.ID+" has expired")
	})
	t.Run("user removed", func(t *testing.T) {
		// Only an admin or the machine's owner has a console, and a user
		// who holds machines cannot be removed: carol is an admin.
		carol := user("carol", true)
		c := attach(t, carol, "before carol goes")
		mustCLI(t, d, admin, "users", "rm", "carol")
		ended(t, c, "user carol has been removed")
	})
	t.Run("machine adopted by another user", func(t *testing.T) {
		c := attach(t, bob, "before alice adopts")
		mustCLI(t, d, alice, "allocate", "--name", "m1", "--token", alloc.Token)
		ended(t, c, "machine m1 is no longer allocated to bob")
	})
	t.Run("machine released", func(t *testing.T) {
		c := attach(t, alice, "before the release")
		mustCLI(t, d, alice, "release", "m1")
		ended(t, c, "machine m1 has been released: it is no longer allocated to alice")
	})
	// What was typed after the last end reached nothing either.
	c := attach(t, admin, "the admin's check")
	io.WriteString(c.in, "\r~.")
	if code := c.wait(t); code != 0 {
		t.Errorf("the admin's detach: exit %d: %s", code, c.errOut.String())
	}
}
