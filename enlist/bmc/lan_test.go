package bmc

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bougou/go-ipmi/pkg/client"
	"github.com/bougou/go-ipmi/pkg/types"

	"rackd/internal/ipmisim"
)

// The real-peer check of the encoders: Setup's raw requests sent to
// OpenIPMI's ipmi_sim over an RMCP+ session as its administrator, where
// the commissioning environment sends them over /dev/ipmi0. Afterwards
// ipmitool, an independent client, logs in as the user Setup created.

// lanConn is Conn over a go-ipmi LAN session.
type lanConn struct {
	ctx context.Context
	c   *client.Client
}

func (l lanConn) Raw(netfn, cmd byte, data []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(l.ctx, 5*time.Second)
	defer cancel()
	res, err := l.c.RawCommand(ctx, types.NetFn(netfn), cmd, data, "bmc set-up")
	var re *types.ResponseError
	if errors.As(err, &re) {
		return nil, &CompletionError{NetFn: netfn, Cmd: cmd, Code: byte(re.CompletionCode())}
	}
	if err != nil {
		return nil, err
	}
	return res.Response, nil
}

func dial(t *testing.T, s *ipmisim.Sim, user, password string) lanConn {
	t.Helper()
	c, err := client.NewClient(s.Host, s.Port, user, password)
	if err != nil {
		t.Fatal(err)
	}
	c.WithTimeout(3 * time.Second).WithRetry(1).WithCipherSuiteID(types.CipherSuiteID(3))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	if err := c.Connect(ctx); err != nil {
		t.Fatalf("RMCP+ session to %s as %s: %v", s.Addr, user, err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return lanConn{ctx: ctx, c: c}
}

func requireSim(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 && os.Getenv("RACKD_IPMISIM") == "" {
		// ipmi_sim itself runs unprivileged, but the suite's real-peer
		// tests run as root (CI is root).
		t.Skip("not root: the ipmi_sim real-peer test runs as root (or set RACKD_IPMISIM=1)")
	}
}

func TestSetupAgainstIPMISim(t *testing.T) {
	requireSim(t)
	s := ipmisim.Start(t, ipmisim.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A BMC whose address was set statically, as its firmware set-up
	// screen would have it.
	for _, args := range [][]string{{"lan", "set", "1", "ipsrc", "static"}, {"lan", "set", "1", "ipaddr", s.Host}} {
		if out, err := s.Ipmitool(ctx, args...); err != nil {
			t.Fatalf("ipmitool %v: %v: %s", args, err, out)
		}
	}
	r, err := Setup(dial(t, s, s.User, s.Password), Options{})
	if err != nil {
		t.Fatalf("Setup against ipmi_sim: %v", err)
	}
	t.Logf("set up: %s", r)
	if r.Channel != 1 || r.Address.String() != s.Host || r.IPSource != IPSourceStatic || r.UserID != 3 || r.User != DefaultUser {
		t.Fatalf("result %+v", r)
	}

	// ipmitool as the new user, IPMI v2.0 with cipher suite 3.
	out, err := s.IpmitoolAs(ctx, r.User, r.Password, "chassis", "power", "status")
	if err != nil || !strings.Contains(out, "Chassis Power is off") {
		t.Fatalf("ipmitool -I lanplus -C 3 -U %s: %v: %s", r.User, err, out)
	}
	out, err = s.IpmitoolAs(ctx, r.User, r.Password, "user", "list", "1")
	if err != nil {
		t.Fatalf("user list: %v: %s", err, out)
	}
	if !userListed(out, r.UserID, r.User) {
		t.Errorf("user list lacks user %d %s as administrator with IPMI messaging:\n%s", r.UserID, r.User, out)
	}
	if !userListed(out, 2, s.User) {
		t.Errorf("the BMC's own admin changed:\n%s", out)
	}
	// The user can manage the chassis: administrator, not just logged in.
	if out, err := s.IpmitoolAs(ctx, r.User, r.Password, "chassis", "bootdev", "pxe"); err != nil {
		t.Errorf("bootdev pxe as %s: %v: %s", r.User, err, out)
	}

	// Again, as the rackd user itself: the same slot, a new password,
	// and the old one no longer works.
	r2, err := Setup(dial(t, s, r.User, r.Password), Options{})
	if err != nil {
		t.Fatalf("second Setup: %v", err)
	}
	if r2.UserID != r.UserID || r2.Password == r.Password {
		t.Fatalf("second set-up: user %d (was %d), new password %v", r2.UserID, r.UserID, r2.Password != r.Password)
	}
	if out, err := s.IpmitoolAs(ctx, r.User, r.Password, "chassis", "power", "status"); err == nil {
		t.Errorf("the old password still logs in: %s", out)
	}
	if out, err := s.IpmitoolAs(ctx, r2.User, r2.Password, "chassis", "power", "status"); err != nil {
		t.Errorf("the new password: %v: %s", err, out)
	}
}

func TestSetupAgainstIPMISimWithoutAddress(t *testing.T) {
	requireSim(t)
	s := ipmisim.Start(t, ipmisim.Options{})
	_, err := Setup(dial(t, s, s.User, s.Password), Options{})
	if !errors.Is(err, ErrNoAddress) {
		t.Fatalf("Setup on a BMC without a LAN address: %v, want ErrNoAddress", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := s.Ipmitool(ctx, "user", "list", "1")
	if err != nil || strings.Contains(out, DefaultUser) {
		t.Errorf("user list after a refused set-up: %v:\n%s", err, out)
	}
}

// userListed finds user id with that name, IPMI messaging on and the
// administrator limit in ipmitool's user list.
func userListed(out string, id int, name string) bool {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 6 && f[0] == strconv.Itoa(id) && f[1] == name && f[4] == "true" && f[5] == "ADMINISTRATOR" {
			return true
		}
	}
	return false
}
