package boot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The Linux input event of a 64-bit kernel: struct timeval (16 bytes),
// type, code (uint16 each) and value (int32), little-endian on amd64 and
// arm64.
const (
	inputEventSize = 24
	evKey          = 1
	keyPower       = 116
)

// ErrNoPowerKey is WaitPowerKey's error when the device ends.
var ErrNoPowerKey = errors.New("the input device ended without a power key press")

// WaitPowerKey reads input events from r (a /dev/input/event* device: the
// ACPI power button's, which a VM's "system_powerdown" and a short press
// of a server's button send) until the power key is pressed.
func WaitPowerKey(r io.Reader) error {
	buf := make([]byte, inputEventSize)
	for {
		if _, err := io.ReadFull(r, buf); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return ErrNoPowerKey
			}
			return fmt.Errorf("read input events: %w", err)
		}
		typ := binary.LittleEndian.Uint16(buf[16:])
		code := binary.LittleEndian.Uint16(buf[18:])
		value := int32(binary.LittleEndian.Uint32(buf[20:]))
		if typ == evKey && code == keyPower && value == 1 {
			return nil
		}
	}
}

// PowerKeyEvent is the bytes of a power key press (tests write it).
func PowerKeyEvent() []byte {
	b := make([]byte, inputEventSize)
	binary.LittleEndian.PutUint16(b[16:], evKey)
	binary.LittleEndian.PutUint16(b[18:], keyPower)
	binary.LittleEndian.PutUint32(b[20:], 1)
	return b
}
