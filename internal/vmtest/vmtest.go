// Package vmtest holds what the real-VM test packages (e2e/, e2e/appliance/)
// share: the repository's root, a rackd built once per test binary, bounded
// build scripts run as a process group, and QEMU's firmware and accelerator
// arguments (which the lab, package rackd/lab, gives its machines too).
package vmtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

// RepoRoot is the module's top directory: the nearest directory above the
// test's working directory (its package) holding go.mod.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			t.Fatalf("no go.mod above %s", dir)
		}
	}
}

var (
	rackdOnce sync.Once
	rackdPath string
	rackdErr  error
)

// Rackd builds the static rackd (./agent/cmd/rackd, CGO_ENABLED=0) once per
// test binary, into a directory Main removes.
func Rackd(t testing.TB) string {
	t.Helper()
	rackdOnce.Do(func() {
		dir, err := os.MkdirTemp("", "rackd-vmtest-")
		if err != nil {
			rackdErr = err
			return
		}
		rackdPath = filepath.Join(dir, "rackd")
		cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", rackdPath, "./agent/cmd/rackd")
		cmd.Dir = RepoRoot(t)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			rackdErr = fmt.Errorf("go build rackd: %v\n%s", err, out)
		}
	})
	if rackdErr != nil {
		t.Fatal(rackdErr)
	}
	return rackdPath
}

// Main runs the tests and removes what Rackd built: TestMain is
// func TestMain(m *testing.M) { os.Exit(vmtest.Main(m)) }.
func Main(m *testing.M) int {
	code := m.Run()
	if rackdPath != "" {
		os.RemoveAll(filepath.Dir(rackdPath))
	}
	return code
}

// Script runs a build (bash and its arguments, in the repository's root,
// with env added to the test's environment) bounded by timeout, and returns
// its combined output. A build is a tree of processes (the script, go, apt,
// mksquashfs...) sharing the output pipe: it runs as a process group of its
// own, and at the deadline the whole group is killed, or the survivors would
// hold the pipe open and keep the test waiting past any timeout.
func Script(t testing.TB, timeout time.Duration, env []string, args ...string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", args...)
	cmd.Dir = RepoRoot(t)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("%w (killed at its %v bound)", err, timeout)
	}
	return out, err
}

// OVMF returns Debian's OVMF firmware code and variable store.
func OVMF(t testing.TB) (code, vars string) {
	t.Helper()
	for _, p := range [][2]string{
		{"/usr/share/OVMF/OVMF_CODE_4M.fd", "/usr/share/OVMF/OVMF_VARS_4M.fd"},
		{"/usr/share/OVMF/OVMF_CODE.fd", "/usr/share/OVMF/OVMF_VARS.fd"},
	} {
		if _, err := os.Stat(p[0]); err == nil {
			return p[0], p[1]
		}
	}
	t.Fatal("OVMF not found in /usr/share/OVMF (Debian package ovmf; see scripts/test-deps.sh)")
	return "", ""
}

// The accelerators' QEMU arguments. TCG takes -cpu max: its RDRAND seeds
// the guest's RNG, without which DHCP clients and rackd's first token wait
// for entropy.
var (
	TCG = []string{"-accel", "tcg", "-cpu", "max"}
	KVM = []string{"-accel", "kvm", "-cpu", "host"}
)

var (
	accelOnce sync.Once
	accel     []string
)

// Accel returns QEMU's accelerator arguments, chosen once per test binary:
// TCG unless RACKD_E2E_ACCEL says kvm, or auto and probe (nil: none) says
// that KVM boots here (it does not under every nested hypervisor).
func Accel(t testing.TB, probe func(kvm []string) (bool, string)) []string {
	t.Helper()
	accelOnce.Do(func() {
		switch mode := os.Getenv("RACKD_E2E_ACCEL"); mode {
		case "", "tcg":
			accel = TCG
		case "kvm":
			accel = KVM
		case "auto":
			accel = TCG
			if probe == nil {
				t.Logf("RACKD_E2E_ACCEL=auto: no KVM probe here; using TCG")
			} else if ok, why := probe(KVM); ok {
				accel = KVM
			} else {
				t.Logf("KVM probe: %s; using TCG", why)
			}
		}
	})
	if accel == nil {
		t.Fatalf("RACKD_E2E_ACCEL=%q: want tcg, kvm or auto", os.Getenv("RACKD_E2E_ACCEL"))
	}
	return append([]string(nil), accel...)
}
