package appliance

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"rackd/internal/atomicfile"
)

// Descriptor is what the appliance's init tells rackd about the running
// appliance (it writes it under /run before starting rackd; rackd's config
// [appliance] descriptor names it).
type Descriptor struct {
	Booted  Slot   `json:"booted"`
	Trial   bool   `json:"trial"`
	Version string `json:"version"`
	Build   int64  `json:"build"`
	// Arch is the appliance's architecture (GOARCH names); empty is the
	// running binary's.
	Arch       string          `json:"arch,omitempty"`
	Slots      map[Slot]string `json:"slots"`
	GrubEnv    string          `json:"grubenv"`
	PublicKey  string          `json:"public_key"`
	StatusFile string          `json:"status_file"`
	DataDevice string          `json:"data_device,omitempty"`
}

// ArchOrRuntime is Arch, or the running binary's when unset.
func (d Descriptor) ArchOrRuntime() string {
	if d.Arch != "" {
		return d.Arch
	}
	return runtime.GOARCH
}

// Inactive is the slot an update writes: the one not booted.
func (d Descriptor) Inactive() Slot { return d.Booted.Other() }

// Validate checks the fields an update needs.
func (d Descriptor) Validate() error {
	var errs []error
	if !d.Booted.Valid() {
		errs = append(errs, fmt.Errorf("booted %q is not a slot (a or b)", d.Booted))
	}
	for _, s := range []Slot{SlotA, SlotB} {
		if d.Slots[s] == "" {
			errs = append(errs, fmt.Errorf("no device for slot %s", s))
		}
	}
	for name, v := range map[string]string{"grubenv": d.GrubEnv, "public_key": d.PublicKey, "status_file": d.StatusFile} {
		if v == "" {
			errs = append(errs, fmt.Errorf("no %s", name))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("appliance descriptor: %w", err)
	}
	return nil
}

// LoadDescriptor reads and validates a descriptor file.
func LoadDescriptor(path string) (Descriptor, error) {
	var d Descriptor
	b, err := os.ReadFile(path)
	if err != nil {
		return d, err
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return Descriptor{}, fmt.Errorf("%s: %w", path, err)
	}
	if err := d.Validate(); err != nil {
		return Descriptor{}, fmt.Errorf("%s: %w", path, err)
	}
	return d, nil
}

// SaveDescriptor writes a descriptor file atomically, making its directory.
func SaveDescriptor(path string, d Descriptor) error {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, append(b, '\n'), atomicfile.Options{Perm: 0o644})
}
