package appliance

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"
)

// Errors of Update that refuse a bundle before anything is written, besides
// ReadBundle's. Each is wrapped with the detail; test with errors.Is.
var (
	ErrWrongArch = errors.New("bundle is for another architecture")
	ErrDowngrade = errors.New("bundle is older than the running version (allow the downgrade to install it anyway)")
	ErrTooLarge  = errors.New("bundle payload is larger than the slot")
	// ErrOnTrial: the running slot is on trial, not yet known good, so the
	// other slot is the only one known to boot: an update must not
	// overwrite it.
	ErrOnTrial = errors.New("the running slot is on trial and not yet marked good")
)

// WipeSize is how much of a slot is zeroed when a write fails: enough to
// erase the squashfs superblock, so nothing mounts or boots a half-written
// slot.
const WipeSize = 1 << 20

// UpdateOptions tune Update.
type UpdateOptions struct {
	AllowDowngrade bool
	// BundleSize is the bundle's whole length when the caller knows it
	// (a file's size, an upload's Content-Length), 0 when not: a bundle
	// cut short or followed by more bytes is then refused before anything
	// is written, instead of found out at the payload's end.
	BundleSize int64
	// PublicKey, when set, is used instead of the descriptor's key file.
	PublicKey ed25519.PublicKey
	// Progress, when set, is called as payload bytes are written.
	Progress func(written, total int64)
	Now      func() time.Time
	// Log gets the update's log; nil discards.
	Log *slog.Logger
}

// SlotSize is the size of a slot's device (or file) in bytes.
func SlotSize(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, fmt.Errorf("size of %s: %w", path, err)
	}
	return n, nil
}

// Update installs the bundle read from r into the inactive slot and arms a
// one-shot trial boot of it. Everything that can refuse the bundle (its
// signature with the appliance's public key, its manifest, its arch, a
// downgrade, a payload larger than the slot, a running slot still on trial,
// a length other than the manifest's when opt.BundleSize tells it) is
// checked before a byte is written. The payload is then streamed to the
// slot while its sha256 is computed; a short, long or wrong payload (or a
// cancelled ctx) zeroes the slot's first WipeSize bytes and arms nothing.
// After an fsync of the slot the GRUB environment is armed (rackd_try,
// rackd_tries=1). The returned status is the one saved to the status file.
func Update(ctx context.Context, r io.Reader, desc Descriptor, opt UpdateOptions) (Status, error) {
	now := opt.Now
	if now == nil {
		now = time.Now
	}
	log := opt.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := desc.Validate(); err != nil {
		return Status{}, err
	}
	st, err := LoadStatus(desc.StatusFile)
	if err != nil {
		return Status{}, fmt.Errorf("appliance status: %w", err)
	}
	target := desc.Inactive()
	started := now()
	// Every change of the status file edits its latest content (the
	// appliance's init writes it too), never the copy read above.
	record := func(change func(*Status)) error {
		var err error
		st, err = UpdateStatus(desc.StatusFile, func(s *Status) error { change(s); return nil })
		return err
	}
	refuse := func(m *Manifest, err error) (Status, error) {
		log.Warn("appliance update refused", "err", err)
		if serr := record(func(s *Status) {
			// An armed update waiting for its reboot keeps its record.
			if s.LastUpdate != nil && s.LastUpdate.Result == ResultArmed {
				return
			}
			u := &UpdateRecord{Slot: target, Started: started, Finished: now(), Result: ResultRefused, Reason: err.Error()}
			if m != nil {
				u.Version, u.Build = m.Version, m.Build
			}
			s.LastUpdate = u
		}); serr != nil {
			err = errors.Join(err, fmt.Errorf("save appliance status: %w", serr))
		}
		return st, err
	}

	pub := opt.PublicKey
	if pub == nil {
		if pub, err = LoadPublicKey(desc.PublicKey); err != nil {
			return st, fmt.Errorf("appliance public key: %w", err)
		}
	}
	env, err := ReadEnvFile(desc.GrubEnv)
	if err != nil {
		return st, fmt.Errorf("GRUB environment: %w", err)
	}
	if good := GoodSlot(env); good != desc.Booted {
		return refuse(nil, fmt.Errorf("%w: slot %s is running, slot %s is the known-good one an update would overwrite; wait until this slot is marked good (rackd appliance status)", ErrOnTrial, desc.Booted, good))
	}
	b, err := ReadBundle(r, pub)
	if err != nil {
		return refuse(nil, err)
	}
	m := b.Manifest
	if n := opt.BundleSize; n > 0 && n != b.Size() {
		if n < b.Size() {
			return refuse(&m, fmt.Errorf("%w: it is %d bytes, its manifest describes %d", ErrTruncated, n, b.Size()))
		}
		return refuse(&m, fmt.Errorf("%w: it is %d bytes, its manifest describes %d", ErrTrailingData, n, b.Size()))
	}
	if arch := desc.ArchOrRuntime(); m.Arch != arch {
		return refuse(&m, fmt.Errorf("%w: the bundle is %s, this appliance %s", ErrWrongArch, m.Arch, arch))
	}
	if m.Build < desc.Build && !opt.AllowDowngrade {
		return refuse(&m, fmt.Errorf("%w: bundle %s (build %d), running %s (build %d)", ErrDowngrade, m.Version, m.Build, desc.Version, desc.Build))
	}
	dev := desc.Slots[target]
	size, err := SlotSize(dev)
	if err != nil {
		return st, fmt.Errorf("slot %s: %w", target, err)
	}
	if m.PayloadSize > size {
		return refuse(&m, fmt.Errorf("%w: the payload is %d bytes, slot %s (%s) %d", ErrTooLarge, m.PayloadSize, target, dev, size))
	}

	// From here on the slot is being overwritten. Disarm a try of it first
	// (an update armed but not rebooted into), and let the status say the
	// write was interrupted until it says otherwise: a power cut leaves
	// that behind, and GRUB boots the good slot.
	if env.Get(EnvTry) != "" {
		if _, err := UpdateEnvFile(desc.GrubEnv, func(e *Env) error {
			e.Set(EnvTry, "")
			e.Set(EnvTries, "0")
			return nil
		}); err != nil {
			return st, fmt.Errorf("disarm the pending try: %w", err)
		}
	}
	if err := record(func(s *Status) {
		s.SetSlot(target, SlotStatus{State: StateEmpty})
		s.LastUpdate = &UpdateRecord{Version: m.Version, Build: m.Build, Slot: target, Started: started, Result: ResultFailed,
			Reason: fmt.Sprintf("interrupted while writing slot %s (rackd stopped or the power was cut)", target)}
	}); err != nil {
		return st, fmt.Errorf("save appliance status: %w", err)
	}
	// This update's record, as written: each later step edits it in the
	// file's latest content.
	mine := func(s *Status) *UpdateRecord {
		if s.LastUpdate == nil {
			s.LastUpdate = &UpdateRecord{Version: m.Version, Build: m.Build, Slot: target, Started: started}
		}
		return s.LastUpdate
	}
	log.Info("appliance update: writing", "slot", target, "device", dev, "version", m.Version, "build", m.Build, "bytes", m.PayloadSize)

	fail := func(err error) (Status, error) {
		log.Error("appliance update failed", "slot", target, "err", err)
		if werr := wipe(dev, size); werr != nil {
			err = errors.Join(err, fmt.Errorf("wipe slot %s: %w", target, werr))
		}
		if serr := record(func(s *Status) {
			s.SetSlot(target, SlotStatus{State: StateEmpty})
			u := mine(s)
			u.Finished, u.Result, u.Reason = now(), ResultFailed, err.Error()
		}); serr != nil {
			err = errors.Join(err, fmt.Errorf("save appliance status: %w", serr))
		}
		return st, err
	}
	if err := writeSlot(ctx, dev, b.Payload, m.PayloadSize, opt.Progress); err != nil {
		return fail(err)
	}
	if _, err := UpdateEnvFile(desc.GrubEnv, func(e *Env) error {
		*e = *ArmTry(e, target)
		return nil
	}); err != nil {
		return fail(fmt.Errorf("arm the GRUB environment: %w", err))
	}
	if err := record(func(s *Status) {
		s.SetSlot(target, SlotStatus{Version: m.Version, Build: m.Build, State: StateTrying})
		u := mine(s)
		u.Finished, u.Result, u.Reason = now(), ResultArmed, ""
	}); err != nil {
		// Armed all the same: the next boot tries the slot.
		return st, fmt.Errorf("update armed, but saving the appliance status failed: %w", err)
	}
	log.Info("appliance update armed", "slot", target, "version", m.Version, "build", m.Build)
	return st, nil
}

// writeSlot copies the payload to the slot device and syncs it. The payload
// reader only ends with io.EOF when the digest matches and nothing follows.
func writeSlot(ctx context.Context, dev string, payload io.Reader, total int64, progress func(int64, int64)) error {
	f, err := openSlot(dev)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	var off int64
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("update cancelled after %d of %d bytes: %w", off, total, err)
		}
		n, rerr := io.ReadFull(payload, buf)
		if n > 0 {
			if _, err := f.WriteAt(buf[:n], off); err != nil {
				return fmt.Errorf("write %s: %w", dev, err)
			}
			off += int64(n)
			if progress != nil {
				progress(off, total)
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return rerr
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dev, err)
	}
	return f.Close()
}

// openSlot opens a slot for writing, never creating or truncating it. A
// block device is opened exclusively: the kernel refuses while it is
// mounted, which the inactive slot never should be.
func openSlot(dev string) (*os.File, error) {
	fl := os.O_WRONLY
	if fi, err := os.Stat(dev); err == nil && fi.Mode()&os.ModeDevice != 0 && fi.Mode()&os.ModeCharDevice == 0 {
		fl |= os.O_EXCL
	}
	f, err := os.OpenFile(dev, fl, 0)
	if err != nil {
		return nil, fmt.Errorf("open slot: %w", err)
	}
	return f, nil
}

func wipe(dev string, size int64) error {
	f, err := openSlot(dev)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, min(size, WipeSize)), 0); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Close()
}

// Reset asks for a factory reset at the next boot: GRUB clears the request
// and the init wipes the data partition.
func Reset(desc Descriptor) error {
	if desc.GrubEnv == "" {
		return errors.New("appliance descriptor: no grubenv")
	}
	_, err := UpdateEnvFile(desc.GrubEnv, func(e *Env) error {
		*e = *RequestReset(e)
		return nil
	})
	return err
}
