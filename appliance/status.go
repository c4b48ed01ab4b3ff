package appliance

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"rackd/internal/atomicfile"
)

// SlotState is what the status file knows of a slot's content.
type SlotState string

const (
	StateGood    SlotState = "good"
	StateTrying  SlotState = "trying"
	StateFailed  SlotState = "failed"
	StateEmpty   SlotState = "empty"
	StateUnknown SlotState = "unknown"
)

// Results of an update, in UpdateRecord.Result.
const (
	ResultArmed   = "armed"
	ResultGood    = "good"
	ResultFailed  = "failed"
	ResultRefused = "refused"
)

// SlotStatus is one slot's content.
type SlotStatus struct {
	Version string    `json:"version,omitempty"`
	Build   int64     `json:"build,omitempty"`
	State   SlotState `json:"state"`
}

// UpdateRecord is the last update and its result.
type UpdateRecord struct {
	Version  string    `json:"version,omitempty"`
	Build    int64     `json:"build,omitempty"`
	Slot     Slot      `json:"slot,omitempty"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished,omitzero"`
	Result   string    `json:"result"`
	Reason   string    `json:"reason,omitempty"`
}

// Status is the appliance's status file: the slots, the booted one, and the
// last update. The init and rackd both write it (never at the same time: the
// init before starting rackd and after it is healthy, rackd when it takes an
// update), each with a whole-file atomic replace.
type Status struct {
	Slots      map[Slot]SlotStatus `json:"slots"`
	Booted     Slot                `json:"booted,omitempty"`
	LastUpdate *UpdateRecord       `json:"last_update,omitempty"`
}

// Slot is a slot's status, unknown when the file says nothing of it.
func (s Status) Slot(slot Slot) SlotStatus {
	if st, ok := s.Slots[slot]; ok && st.State != "" {
		return st
	}
	return SlotStatus{State: StateUnknown}
}

// SetSlot sets a slot's status.
func (s *Status) SetSlot(slot Slot, st SlotStatus) {
	if s.Slots == nil {
		s.Slots = map[Slot]SlotStatus{}
	}
	s.Slots[slot] = st
}

// Clone is a deep copy.
func (s Status) Clone() Status {
	c := Status{Booted: s.Booted}
	for k, v := range s.Slots {
		c.SetSlot(k, v)
	}
	if s.LastUpdate != nil {
		u := *s.LastUpdate
		c.LastUpdate = &u
	}
	return c
}

// LoadStatus reads the status file; a missing file is an empty status (both
// slots unknown).
func LoadStatus(path string) (Status, error) {
	var s Status
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return Status{}, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// SaveStatus replaces the status file atomically and durably, making its
// directory if needed.
func SaveStatus(path string, s Status) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, append(b, '\n'), atomicfile.Options{Perm: 0o644})
}

// RecordBoot is the status after a boot of booted running version/build:
// the booted slot's content is known, and (outcome BootTryFailed) the failed
// try of slot failed is recorded with the reason its trial boot left, else
// "the new slot did not come up".
func RecordBoot(s Status, booted Slot, version string, build int64, outcome BootOutcome, failed Slot, now time.Time) Status {
	s = s.Clone()
	s.Booted = booted
	st := s.Slot(booted)
	st.Version, st.Build = version, build
	if outcome == BootTrial {
		st.State = StateTrying
	} else {
		st.State = StateGood
	}
	s.SetSlot(booted, st)
	if outcome == BootTryFailed {
		fst := s.Slot(failed)
		fst.State = StateFailed
		s.SetSlot(failed, fst)
		u := UpdateRecord{Slot: failed, Version: fst.Version, Build: fst.Build, Started: now}
		if s.LastUpdate != nil && s.LastUpdate.Slot == failed {
			u = *s.LastUpdate
		}
		// The trial boot records why it gave up before it reboots; a
		// trial that could not (a kernel panic, a hang) leaves the
		// update armed.
		if u.Result != ResultFailed || u.Reason == "" {
			u.Reason = "the new slot did not come up"
		}
		if u.Finished.IsZero() {
			u.Finished = now
		}
		u.Result = ResultFailed
		s.LastUpdate = &u
	}
	return s
}

// RecordTrialGood is the status once the trial boot of booted is healthy.
func RecordTrialGood(s Status, booted Slot, now time.Time) Status {
	s = s.Clone()
	st := s.Slot(booted)
	st.State = StateGood
	s.SetSlot(booted, st)
	if u := s.LastUpdate; u != nil && u.Slot == booted {
		u.Result, u.Reason, u.Finished = ResultGood, "", now
	}
	return s
}

// RecordTrialFailed is the status when the trial boot of booted did not
// become healthy, before the init reboots into the good slot: why is the
// reason the status will show ("rackd exited 3 times", "DHCP interface eth1
// never bound").
func RecordTrialFailed(s Status, booted Slot, why string, now time.Time) Status {
	s = s.Clone()
	st := s.Slot(booted)
	st.State = StateFailed
	s.SetSlot(booted, st)
	u := s.LastUpdate
	if u == nil || u.Slot != booted {
		u = &UpdateRecord{Slot: booted, Version: st.Version, Build: st.Build, Started: now}
		s.LastUpdate = u
	}
	u.Result, u.Reason, u.Finished = ResultFailed, why, now
	return s
}

// UpdateStatus changes the status file under an exclusive lock (a file
// beside it, path+".lock"): it reads the file, lets change edit what it
// read, and saves the result. The appliance's init and rackd both write the
// file (a boot's outcome and a trial's verdict; an update's progress): each
// edits the latest content instead of saving a copy it read earlier over
// the other's change. A change that fails leaves the file as it was.
func UpdateStatus(path string, change func(*Status) error) (Status, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return Status{}, err
	}
	unlock, err := lockFile(path + ".lock")
	if err != nil {
		return Status{}, fmt.Errorf("lock %s: %w", path, err)
	}
	defer unlock()
	st, err := LoadStatus(path)
	if err != nil {
		return Status{}, err
	}
	if err := change(&st); err != nil {
		return st, err
	}
	return st, SaveStatus(path, st)
}
