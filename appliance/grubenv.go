package appliance

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// GRUB's environment block (grub-core/lib/envblk.c): a signature line, then
// "name=value\n" lines, where a backslash escapes the next byte ("\\\\" and
// "\\\n"), and '#' up to the block's size. GRUB's save_env writes the block
// into the file's existing sectors, so the file is always rewritten in place,
// at the same size, never truncated or replaced.
const (
	EnvSignature = "# GRUB Environment Block\n"
	// EnvSize is the size grub-editenv creates and the appliance image uses.
	EnvSize = 1024
)

// The variables the appliance's grub.cfg reads and writes.
const (
	EnvGood  = "rackd_good"
	EnvTry   = "rackd_try"
	EnvTries = "rackd_tries"
	EnvReset = "rackd_reset"
)

var (
	ErrNotEnv  = errors.New("not a GRUB environment block (no signature)")
	ErrEnvFull = errors.New("GRUB environment block is full")
)

// Env is a GRUB environment block: its variables in order, and its size.
type Env struct {
	names  []string
	values map[string]string
	size   int
}

// NewEnv is an empty block of EnvSize bytes.
func NewEnv() *Env { return &Env{values: map[string]string{}, size: EnvSize} }

// EnvOf is a block of EnvSize bytes holding vars, in name order.
func EnvOf(vars map[string]string) *Env {
	e := NewEnv()
	for _, k := range sortedKeys(vars) {
		e.names = append(e.names, k)
		e.values[k] = vars[k]
	}
	return e
}

// ParseEnv reads a block the way GRUB does: comment lines ('#' first) are
// skipped, a name runs to '=', a value to an unescaped newline, and an
// unterminated last variable is ignored. A later duplicate of a name wins, as
// GRUB's lookup of the first one then rewrite would leave only one.
func ParseEnv(b []byte) (*Env, error) {
	if !bytes.HasPrefix(b, []byte(EnvSignature)) {
		return nil, ErrNotEnv
	}
	e := &Env{values: map[string]string{}, size: len(b)}
	p := b[len(EnvSignature):]
	for len(p) > 0 {
		if p[0] == '#' {
			i := bytes.IndexByte(p, '\n')
			if i < 0 {
				break
			}
			p = p[i+1:]
			continue
		}
		eq := bytes.IndexByte(p, '=')
		if eq < 0 {
			break
		}
		name := string(p[:eq])
		p = p[eq+1:]
		var val []byte
		end := -1
		for i := 0; i < len(p); i++ {
			if p[i] == '\n' {
				end = i
				break
			}
			if p[i] == '\\' {
				if i+1 >= len(p) {
					break
				}
				i++
			}
			val = append(val, p[i])
		}
		if end < 0 {
			break
		}
		p = p[end+1:]
		if _, ok := e.values[name]; !ok {
			e.names = append(e.names, name)
		}
		e.values[name] = string(val)
	}
	return e, nil
}

// Size is the block's size in bytes.
func (e *Env) Size() int { return e.size }

// Get is a variable's value, "" when unset.
func (e *Env) Get(name string) string { return e.values[name] }

// Lookup is a variable's value and whether it is set.
func (e *Env) Lookup(name string) (string, bool) {
	v, ok := e.values[name]
	return v, ok
}

// Names are the set variables in block order.
func (e *Env) Names() []string { return append([]string(nil), e.names...) }

// Map is a copy of the variables.
func (e *Env) Map() map[string]string {
	m := make(map[string]string, len(e.values))
	for k, v := range e.values {
		m[k] = v
	}
	return m
}

// Clone is a deep copy.
func (e *Env) Clone() *Env {
	c := &Env{names: append([]string(nil), e.names...), values: e.Map(), size: e.size}
	return c
}

// ValidEnvName reports whether GRUB can store and read back name: not empty,
// no '=' (the separator), no newline, not starting with '#' (a comment).
func ValidEnvName(name string) error {
	switch {
	case name == "":
		return errors.New("empty GRUB variable name")
	case strings.ContainsAny(name, "=\n"), name[0] == '#':
		return fmt.Errorf("GRUB variable name %q: no '=', newline or leading '#'", name)
	}
	return nil
}

// Set sets a variable, keeping its place if it is set already.
func (e *Env) Set(name, value string) error {
	if err := ValidEnvName(name); err != nil {
		return err
	}
	if _, ok := e.values[name]; !ok {
		e.names = append(e.names, name)
	}
	e.values[name] = value
	return nil
}

// Unset removes a variable.
func (e *Env) Unset(name string) {
	if _, ok := e.values[name]; !ok {
		return
	}
	delete(e.values, name)
	for i, n := range e.names {
		if n == name {
			e.names = append(e.names[:i], e.names[i+1:]...)
			break
		}
	}
}

// Marshal encodes the block at its size, padded with '#'.
func (e *Env) Marshal() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(EnvSignature)
	for _, n := range e.names {
		b.WriteString(n)
		b.WriteByte('=')
		for _, c := range []byte(e.values[n]) {
			if c == '\\' || c == '\n' {
				b.WriteByte('\\')
			}
			b.WriteByte(c)
		}
		b.WriteByte('\n')
	}
	if b.Len() > e.size {
		return nil, fmt.Errorf("%w: the variables need %d bytes of %d", ErrEnvFull, b.Len(), e.size)
	}
	b.Write(bytes.Repeat([]byte{'#'}, e.size-b.Len()))
	return b.Bytes(), nil
}

// ReadEnvFile reads a grubenv file.
func ReadEnvFile(path string) (*Env, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	e, err := ParseEnv(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return e, nil
}

// CreateEnvFile writes a new grubenv file of e (as grub-editenv create
// does); it refuses to replace an existing file.
func CreateEnvFile(path string, e *Env) error {
	b, err := e.Marshal()
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return f.Close()
}

// WriteEnvFile rewrites an existing grubenv file in place with e: the same
// number of bytes over the same blocks, then fsync. The file must be e's
// size (read it with ReadEnvFile first).
func WriteEnvFile(path string, e *Env) error {
	b, err := e.Marshal()
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if size != int64(len(b)) {
		return fmt.Errorf("%s is %d bytes, the block %d: it must be rewritten at its size", path, size, len(b))
	}
	if _, err := f.WriteAt(b, 0); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return f.Close()
}

// UpdateEnvFile reads path, lets change edit the block, and rewrites it in
// place if anything changed.
func UpdateEnvFile(path string, change func(*Env) error) (*Env, error) {
	e, err := ReadEnvFile(path)
	if err != nil {
		return nil, err
	}
	before, err := e.Marshal()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := change(e); err != nil {
		return nil, err
	}
	after, err := e.Marshal()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if bytes.Equal(before, after) {
		return e, nil
	}
	return e, WriteEnvFile(path, e)
}
