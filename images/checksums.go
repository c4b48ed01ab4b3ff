package images

import (
	"bytes"
	"fmt"
	"strings"
)

// MaxChecksumsSize bounds a checksum list an import reads (a vendor's
// SHA256SUMS lists a few dozen files).
const MaxChecksumsSize = 1 << 20

// Digest algorithms a checksum list may use, named as their tools are.
const (
	AlgoSHA256 = "sha256"
	AlgoSHA512 = "sha512"
)

// Checksums are the digests a checksum list gives one file, by algorithm
// (AlgoSHA256, AlgoSHA512), in lowercase hex.
type Checksums map[string]string

// ParseChecksums finds the digests of the file name in a checksum list as
// vendors publish them beside their images:
//
//   - the GNU form that sha256sum and sha512sum write and check:
//     "<hex>  <name>" (text mode) or "<hex> *<name>" (binary mode), with a
//     leading backslash when the name is escaped (\\ and \n);
//   - the BSD form (sha256sum --tag, and Fedora's CHECKSUM files):
//     "SHA256 (<name>) = <hex>", "SHA512 (<name>) = <hex>".
//
// The algorithm of a GNU line is its digest's length (64 hex digits are
// SHA-256, 128 SHA-512). Lines of neither form (comments, a PGP
// signature's armour, blank lines) are skipped, and a name listed as
// "./name" matches name. A name listed twice with different digests of one
// algorithm is an error, as is a name not listed at all.
func ParseChecksums(data []byte, name string) (Checksums, error) {
	if len(data) > MaxChecksumsSize {
		return nil, fmt.Errorf("checksum list of %d bytes, at most %d", len(data), MaxChecksumsSize)
	}
	if name == "" {
		return nil, fmt.Errorf("checksum list: no file name to look up")
	}
	got := Checksums{}
	listed := 0
	for _, line := range bytes.Split(data, []byte("\n")) {
		algo, digest, file, ok := parseChecksumLine(strings.TrimSuffix(string(line), "\r"))
		if !ok {
			continue
		}
		listed++
		if strings.TrimPrefix(file, "./") != name {
			continue
		}
		if prev, dup := got[algo]; dup && prev != digest {
			return nil, fmt.Errorf("checksum list gives %s two different %s digests (%s and %s)", name, algo, prev, digest)
		}
		got[algo] = digest
	}
	if len(got) == 0 {
		return nil, fmt.Errorf("checksum list has no entry for %q (it lists %d files)", name, listed)
	}
	return got, nil
}

// parseChecksumLine reads one line of a checksum list, reporting false
// for a line of neither form.
func parseChecksumLine(line string) (algo, digest, name string, ok bool) {
	// BSD: "SHA256 (name) = hex"; the name may hold ") = ", so the
	// digest is what follows the last one.
	for _, a := range []struct{ tag, algo string }{{"SHA256 (", AlgoSHA256}, {"SHA512 (", AlgoSHA512}} {
		rest, found := strings.CutPrefix(line, a.tag)
		if !found {
			continue
		}
		i := strings.LastIndex(rest, ") = ")
		if i < 0 {
			return "", "", "", false
		}
		name, digest = rest[:i], strings.ToLower(rest[i+len(") = "):])
		if name == "" || !isDigest(digest, a.algo) {
			return "", "", "", false
		}
		return a.algo, digest, name, true
	}
	// GNU: "hex  name" or "hex *name", "\hex  escaped-name".
	escaped := strings.HasPrefix(line, "\\")
	if escaped {
		line = line[1:]
	}
	hexPart, rest, found := strings.Cut(line, " ")
	if !found || rest == "" || rest[0] != ' ' && rest[0] != '*' {
		return "", "", "", false
	}
	name, digest = rest[1:], strings.ToLower(hexPart)
	switch {
	case isDigest(digest, AlgoSHA256):
		algo = AlgoSHA256
	case isDigest(digest, AlgoSHA512):
		algo = AlgoSHA512
	default:
		return "", "", "", false
	}
	if escaped {
		var err error
		if name, err = unescapeChecksumName(name); err != nil {
			return "", "", "", false
		}
	}
	if name == "" {
		return "", "", "", false
	}
	return algo, digest, name, true
}

// isDigest reports whether h is a lowercase hex digest of algo.
func isDigest(h, algo string) bool {
	switch algo {
	case AlgoSHA256:
		return validHexLen(h, 64)
	case AlgoSHA512:
		return validHexLen(h, 128)
	}
	return false
}

// unescapeChecksumName undoes the GNU tools' escaping of a name: \\ is a
// backslash, \n a newline; any other escape is malformed.
func unescapeChecksumName(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 == len(s) {
			return "", fmt.Errorf("a trailing backslash")
		}
		i++
		switch s[i] {
		case '\\':
			b.WriteByte('\\')
		case 'n':
			b.WriteByte('\n')
		default:
			return "", fmt.Errorf("unknown escape \\%c", s[i])
		}
	}
	return b.String(), nil
}
