package appliance

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type rig struct {
	desc Descriptor
	pub  ed25519.PublicKey
	priv ed25519.PrivateKey
	// slotB is the inactive slot's content before the update.
	slotB []byte
}

const rigSlotSize = 4 << 20

// newRig is an appliance booted from slot a (build 100) with slot b a file
// of rigSlotSize bytes of a pattern, or dev when set.
func newRig(t *testing.T, dev string) *rig {
	t.Helper()
	dir := t.TempDir()
	pub, priv := testKey(t)
	pubPEM, _ := MarshalPublicKey(pub)
	os.WriteFile(filepath.Join(dir, "bundle.pub"), pubPEM, 0o644)
	r := &rig{pub: pub, priv: priv, slotB: bytes.Repeat([]byte{0xa5}, rigSlotSize)}
	if dev == "" {
		dev = filepath.Join(dir, "slot-b")
	}
	if err := os.WriteFile(dev, r.slotB, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := CreateEnvFile(filepath.Join(dir, "grubenv"), EnvOf(map[string]string{EnvGood: "a", EnvTry: "", EnvTries: "0", EnvReset: ""})); err != nil {
		t.Fatal(err)
	}
	r.desc = Descriptor{
		Booted: SlotA, Version: "v1.0", Build: 100, Arch: "amd64",
		Slots:   map[Slot]string{SlotA: filepath.Join(dir, "slot-a"), SlotB: dev},
		GrubEnv: filepath.Join(dir, "grubenv"), PublicKey: filepath.Join(dir, "bundle.pub"),
		StatusFile: filepath.Join(dir, "status", "status.json"),
	}
	return r
}

func (r *rig) slot(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(r.desc.Slots[SlotB])
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (r *rig) env(t *testing.T) *Env {
	t.Helper()
	e, err := ReadEnvFile(r.desc.GrubEnv)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestUpdateArms(t *testing.T) {
	r := newRig(t, "")
	payload := testPayload(3<<20 + 5)
	bundle := makeBundle(t, r.priv, "v1.1", 101, "amd64", payload)
	var last int64
	st, err := Update(context.Background(), bytes.NewReader(bundle), r.desc, UpdateOptions{BundleSize: int64(len(bundle)), Progress: func(w, total int64) { last = w }})
	if err != nil {
		t.Fatal(err)
	}
	got := r.slot(t)
	if len(got) != rigSlotSize || !bytes.Equal(got[:len(payload)], payload) || !bytes.Equal(got[len(payload):], r.slotB[len(payload):]) {
		t.Fatal("slot b does not hold the payload (in place, not truncated)")
	}
	if last != int64(len(payload)) {
		t.Fatalf("progress ended at %d", last)
	}
	env := r.env(t)
	if env.Get(EnvTry) != "b" || env.Get(EnvTries) != "1" || env.Get(EnvGood) != "a" {
		t.Fatalf("grubenv %v", env.Map())
	}
	saved, err := LoadStatus(r.desc.StatusFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []Status{st, saved} {
		if s.Slot(SlotB) != (SlotStatus{Version: "v1.1", Build: 101, State: StateTrying}) || s.LastUpdate == nil || s.LastUpdate.Result != ResultArmed || s.LastUpdate.Slot != SlotB || s.LastUpdate.Finished.IsZero() {
			t.Fatalf("status %+v %+v", s, s.LastUpdate)
		}
	}
	// Equal build is allowed (reinstalling the same version).
	same := makeBundle(t, r.priv, "v1.0", 100, "amd64", payload)
	if _, err := Update(context.Background(), bytes.NewReader(same), r.desc, UpdateOptions{}); err != nil {
		t.Fatalf("same build: %v", err)
	}
}

func TestUpdateRefusesBeforeWriting(t *testing.T) {
	_, other := testKey(t)
	payload := testPayload(1 << 20)
	cases := []struct {
		name   string
		bundle func(r *rig) []byte
		opt    UpdateOptions
		prep   func(t *testing.T, r *rig)
		want   error
	}{
		{"unsigned", func(r *rig) []byte {
			b := makeBundle(t, r.priv, "v2", 200, "amd64", payload)
			n := len(b) - len(payload)
			copy(b[n-SignatureSize:n], make([]byte, SignatureSize))
			return b
		}, UpdateOptions{}, nil, ErrBadSignature},
		{"other key", func(r *rig) []byte { return makeBundle(t, other, "v2", 200, "amd64", payload) }, UpdateOptions{}, nil, ErrBadSignature},
		{"truncated header", func(r *rig) []byte { return makeBundle(t, r.priv, "v2", 200, "amd64", payload)[:50] }, UpdateOptions{}, nil, ErrTruncated},
		{"not a bundle", func(r *rig) []byte { return payload }, UpdateOptions{}, nil, ErrNotBundle},
		{"downgrade", func(r *rig) []byte { return makeBundle(t, r.priv, "v0.9", 99, "amd64", payload) }, UpdateOptions{}, nil, ErrDowngrade},
		{"wrong arch", func(r *rig) []byte { return makeBundle(t, r.priv, "v2", 200, "arm64", payload) }, UpdateOptions{}, nil, ErrWrongArch},
		{"larger than the slot", func(r *rig) []byte { return makeBundle(t, r.priv, "v2", 200, "amd64", testPayload(rigSlotSize+1)) }, UpdateOptions{}, nil, ErrTooLarge},
		{"running slot on trial", func(r *rig) []byte { return makeBundle(t, r.priv, "v2", 200, "amd64", payload) }, UpdateOptions{}, func(t *testing.T, r *rig) {
			// Booted a, but b is the known-good slot: a is on trial.
			UpdateEnvFile(r.desc.GrubEnv, func(e *Env) error { return e.Set(EnvGood, "b") })
		}, ErrOnTrial},
	}
	// With the bundle's length known, a truncated payload or bytes after it
	// are refused before writing too.
	sized := func(cut int) func(r *rig) []byte {
		return func(r *rig) []byte {
			b := makeBundle(t, r.priv, "v2", 200, "amd64", payload)
			if cut < 0 {
				return b[:len(b)+cut]
			}
			return append(b, make([]byte, cut)...)
		}
	}
	cases = append(cases,
		struct {
			name   string
			bundle func(r *rig) []byte
			opt    UpdateOptions
			prep   func(t *testing.T, r *rig)
			want   error
		}{"truncated payload, length known", sized(-1000), UpdateOptions{}, nil, ErrTruncated},
		struct {
			name   string
			bundle func(r *rig) []byte
			opt    UpdateOptions
			prep   func(t *testing.T, r *rig)
			want   error
		}{"trailing bytes, length known", sized(10), UpdateOptions{}, nil, ErrTrailingData},
	)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, "")
			if c.prep != nil {
				c.prep(t, r)
			}
			envBefore, _ := os.ReadFile(r.desc.GrubEnv)
			data := c.bundle(r)
			if strings.Contains(c.name, "length known") {
				c.opt.BundleSize = int64(len(data))
			}
			st, err := Update(context.Background(), bytes.NewReader(data), r.desc, c.opt)
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
			if !bytes.Equal(r.slot(t), r.slotB) {
				t.Fatal("the slot was written")
			}
			if envAfter, _ := os.ReadFile(r.desc.GrubEnv); !bytes.Equal(envBefore, envAfter) {
				t.Fatal("grubenv changed")
			}
			saved, _ := LoadStatus(r.desc.StatusFile)
			if st.LastUpdate == nil || st.LastUpdate.Result != ResultRefused || saved.LastUpdate == nil || saved.LastUpdate.Reason != err.Error() {
				t.Fatalf("status %+v", saved.LastUpdate)
			}
		})
	}
	t.Run("downgrade allowed", func(t *testing.T) {
		r := newRig(t, "")
		b := makeBundle(t, r.priv, "v0.9", 99, "amd64", payload)
		if _, err := Update(context.Background(), bytes.NewReader(b), r.desc, UpdateOptions{AllowDowngrade: true}); err != nil {
			t.Fatal(err)
		}
		if r.env(t).Get(EnvTry) != "b" {
			t.Fatal("not armed")
		}
	})
}

// A payload that turns out wrong once written: the slot's first MiB is
// zeroed, nothing armed, the status says the slot is empty.
func TestUpdateBadPayloadWipes(t *testing.T) {
	payload := testPayload(2 << 20)
	cases := []struct {
		name   string
		bundle func(r *rig) []byte
		ctx    func() context.Context
		want   error
	}{
		{"truncated payload", func(r *rig) []byte {
			b := makeBundle(t, r.priv, "v2", 200, "amd64", payload)
			return b[:len(b)-1000]
		}, context.Background, ErrTruncated},
		{"changed payload", func(r *rig) []byte {
			b := makeBundle(t, r.priv, "v2", 200, "amd64", payload)
			b[len(b)-1] ^= 1
			return b
		}, context.Background, ErrPayloadDigest},
		{"trailing bytes", func(r *rig) []byte {
			return append(makeBundle(t, r.priv, "v2", 200, "amd64", payload), "more"...)
		}, context.Background, ErrTrailingData},
		{"cancelled", func(r *rig) []byte { return makeBundle(t, r.priv, "v2", 200, "amd64", payload) },
			func() context.Context { c, cancel := context.WithCancel(context.Background()); cancel(); return c }, context.Canceled},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, "")
			// A try armed but not rebooted into is disarmed by the new
			// update before it writes.
			UpdateEnvFile(r.desc.GrubEnv, func(e *Env) error { *e = *ArmTry(e, SlotB); return nil })
			_, err := Update(c.ctx(), bytes.NewReader(c.bundle(r)), r.desc, UpdateOptions{})
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
			got := r.slot(t)
			if !bytes.Equal(got[:WipeSize], make([]byte, WipeSize)) {
				t.Fatal("the slot's first MiB is not zeroed")
			}
			if len(got) != rigSlotSize {
				t.Fatalf("slot is %d bytes", len(got))
			}
			if env := r.env(t); env.Get(EnvTry) != "" || env.Get(EnvTries) != "0" {
				t.Fatalf("armed after a failed write: %v", env.Map())
			}
			saved, _ := LoadStatus(r.desc.StatusFile)
			if saved.Slot(SlotB).State != StateEmpty || saved.LastUpdate.Result != ResultFailed || !strings.Contains(saved.LastUpdate.Reason, c.want.Error()) {
				t.Fatalf("status %+v %+v", saved.Slot(SlotB), saved.LastUpdate)
			}
		})
	}
}

func TestReset(t *testing.T) {
	r := newRig(t, "")
	if err := Reset(r.desc); err != nil {
		t.Fatal(err)
	}
	if !ResetRequested(r.env(t)) {
		t.Fatal("no reset requested")
	}
}

// The update writer against a real block device: a loop device over a
// file.
func TestUpdateLoopDevice(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for losetup")
	}
	if _, err := exec.LookPath("losetup"); err != nil {
		t.Skip("losetup not installed")
	}
	backing := filepath.Join(t.TempDir(), "backing")
	if err := os.WriteFile(backing, bytes.Repeat([]byte{0xa5}, rigSlotSize), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", backing).CombinedOutput()
	if err != nil {
		t.Skipf("losetup cannot attach a loop device here: %v %s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if o, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v %s", dev, err, o)
		}
	})
	fi, err := os.Stat(dev)
	if err != nil || fi.Mode()&os.ModeDevice == 0 {
		t.Fatalf("%s is not a device: %v", dev, err)
	}
	r := newRig(t, "")
	r.desc.Slots[SlotB] = dev
	if n, err := SlotSize(dev); err != nil || n != rigSlotSize {
		t.Fatalf("SlotSize %d %v", n, err)
	}
	// Too large for the device: refused, untouched.
	big := makeBundle(t, r.priv, "v2", 200, "amd64", testPayload(rigSlotSize+512))
	if _, err := Update(context.Background(), bytes.NewReader(big), r.desc, UpdateOptions{}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("too large: %v", err)
	}
	payload := testPayload(3<<20 + 4096)
	start := time.Now()
	if _, err := Update(context.Background(), bytes.NewReader(makeBundle(t, r.priv, "v2", 200, "amd64", payload)), r.desc, UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %d bytes to %s in %v", len(payload), dev, time.Since(start))
	// Read back through the backing file: what reached the device.
	exec.Command("blockdev", "--flushbufs", dev).Run()
	got, err := os.ReadFile(backing)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[:len(payload)], payload) {
		t.Fatal("the device does not hold the payload")
	}
	// A bad payload on the device: its first MiB zeroed.
	bad := makeBundle(t, r.priv, "v3", 300, "amd64", payload)
	bad[len(bad)-1] ^= 1
	if _, err := Update(context.Background(), bytes.NewReader(bad), r.desc, UpdateOptions{}); !errors.Is(err, ErrPayloadDigest) {
		t.Fatalf("bad payload: %v", err)
	}
	exec.Command("blockdev", "--flushbufs", dev).Run()
	got, _ = os.ReadFile(backing)
	if !bytes.Equal(got[:WipeSize], make([]byte, WipeSize)) {
		t.Fatal("first MiB of the device not zeroed")
	}
}
