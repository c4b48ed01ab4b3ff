package agent

import (
	"errors"
	"fmt"
	"time"

	"rackd/power/queue"
)

// PowerConfig is the [power] section: the power queue's bounds and timings,
// and the fake driver for tests and benchmarks.
type PowerConfig struct {
	MaxInFlight      int      `toml:"max_in_flight"`
	MaxPerBMC        int      `toml:"max_per_bmc"`
	MinInterval      Duration `toml:"min_interval"`
	CommandTimeout   Duration `toml:"command_timeout"`
	VerifyDeadline   Duration `toml:"verify_deadline"`
	VerifyInterval   Duration `toml:"verify_interval"`
	Retries          int      `toml:"retries"`
	Backoff          Duration `toml:"backoff"`
	BackoffMax       Duration `toml:"backoff_max"`
	BreakerThreshold int      `toml:"breaker_threshold"`
	BreakerCooldown  Duration `toml:"breaker_cooldown"`
	PollInterval     Duration `toml:"poll_interval"`
	// RedfishOff is how the Redfish driver powers a machine off: "force"
	// (ForceOff: at once, as IPMI's chassis power off) or "graceful"
	// (GracefulShutdown: the OS shuts down, where the BMC offers it).
	RedfishOff string `toml:"redfish_off"`
	Fake       struct {
		Enabled bool     `toml:"enabled"`
		Latency Duration `toml:"latency"`
		Log     string   `toml:"log"`
		// HangAfter, when above 0, makes every command that would change
		// something hang until its context ends once HangAfter took effect.
		HangAfter int `toml:"hang_after"`
	} `toml:"fake"`
}

func (p PowerConfig) validate() error {
	var errs []error
	if p.MaxInFlight < 1 || p.MaxPerBMC < 1 {
		errs = append(errs, errors.New("power.max_in_flight and power.max_per_bmc must be at least 1"))
	}
	switch p.RedfishOff {
	case "", "force", "graceful":
	default:
		errs = append(errs, fmt.Errorf("power.redfish_off %q: want force or graceful", p.RedfishOff))
	}
	if p.Retries < 0 || p.BreakerThreshold < 1 {
		errs = append(errs, errors.New("power.retries must be >= 0 and power.breaker_threshold >= 1"))
	}
	for name, d := range map[string]Duration{"power.command_timeout": p.CommandTimeout, "power.verify_deadline": p.VerifyDeadline,
		"power.verify_interval": p.VerifyInterval, "power.backoff": p.Backoff, "power.backoff_max": p.BackoffMax,
		"power.breaker_cooldown": p.BreakerCooldown} {
		if d < Duration(time.Millisecond) {
			errs = append(errs, fmt.Errorf("%s must be at least 1ms", name))
		}
	}
	if p.PollInterval != 0 && p.PollInterval < Duration(time.Second) {
		errs = append(errs, errors.New("power.poll_interval must be 0s (off) or at least 1s"))
	}
	return errors.Join(errs...)
}

func (p PowerConfig) queueConfig() queue.Config {
	return queue.Config{
		Global: p.MaxInFlight, PerBMC: p.MaxPerBMC, MinInterval: time.Duration(p.MinInterval),
		CommandTimeout: time.Duration(p.CommandTimeout), VerifyDeadline: time.Duration(p.VerifyDeadline),
		VerifyInterval: time.Duration(p.VerifyInterval), Retries: p.Retries,
		BackoffBase: time.Duration(p.Backoff), BackoffMax: time.Duration(p.BackoffMax),
		BreakerThreshold: p.BreakerThreshold, BreakerCooldown: time.Duration(p.BreakerCooldown),
		PollInterval: time.Duration(p.PollInterval),
	}
}
