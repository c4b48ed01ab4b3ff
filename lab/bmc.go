package lab

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"rackd/internal/ipmisim"
	"rackd/internal/redfishsim"
)

// bmcFlags are the flags both BMCs take; the machine's command line
// follows "--".
type bmcFlags struct {
	listen, user, password string
	powerOn                bool
	machine                []string
}

func parseBMC(name, defListen string, args []string, stderr io.Writer) (bmcFlags, error) {
	var f bmcFlags
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.listen, "listen", defListen, "HOST:PORT to listen on")
	fs.StringVar(&f.user, "user", "admin", "the BMC's user")
	fs.StringVar(&f.password, "password", "", "the BMC's password (default: $RACKD_BMC_PASSWORD, else secret)")
	fs.BoolVar(&f.powerOn, "power-on", false, "start with the power on (the machine started)")
	if err := fs.Parse(args); err != nil {
		return f, usageError(err.Error())
	}
	f.machine = fs.Args()
	if len(f.machine) > 0 && len(args) > 0 && !containsDashDash(args) {
		return f, usageError(fmt.Sprintf("unexpected argument %q: the machine's command line follows --", f.machine[0]))
	}
	if f.password == "" {
		f.password = os.Getenv("RACKD_BMC_PASSWORD")
	}
	if f.password == "" {
		f.password = "secret"
	}
	return f, nil
}

func containsDashDash(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return true
		}
	}
	return false
}

// runRedfish serves one simulated Redfish BMC (package redfishsim) until
// ctx ends.
func runRedfish(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseBMC("redfish", "127.0.0.1:8443", args, stderr)
	if err != nil {
		return err
	}
	sim, err := redfishsim.New(redfishsim.Options{Addr: f.listen, User: f.user, Password: f.password,
		PowerOn: f.powerOn, Machine: f.machine})
	if err != nil {
		return err
	}
	defer sim.Close()
	fmt.Fprintf(stdout, "rackd-lab redfish: Redfish BMC at %s (user %s), certificate sha256 %s, power %s\n",
		sim.URL, sim.User, sim.Fingerprint(), sim.Power())
	<-ctx.Done()
	fmt.Fprintf(stdout, "rackd-lab redfish: stopping (the machine too)\n")
	return sim.Close()
}

// runIPMI runs one ipmi_sim BMC (package ipmisim) until ctx ends.
func runIPMI(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseBMC("ipmi", "127.0.0.1:623", args, stderr)
	if err != nil {
		return err
	}
	// A loaded machine (a lab's VMs under TCG, a build) can take ipmi_sim
	// past ipmisim's default 10 s to its first answer.
	sim, err := ipmisim.New(ipmisim.Options{Addr: f.listen, User: f.user, Password: f.password,
		PowerOn: f.powerOn, Machine: f.machine, StartTimeout: time.Minute})
	if err != nil {
		return err
	}
	defer sim.Close()
	fmt.Fprintf(stdout, "rackd-lab ipmi: IPMI BMC (ipmi_sim pid %d) at %s (user %s, lanplus, cipher suite 3), state in %s\n",
		sim.PID(), sim.Addr, sim.User, sim.Dir)
	<-ctx.Done()
	fmt.Fprintf(stdout, "rackd-lab ipmi: stopping (the machine too)\n")
	return sim.Close()
}
