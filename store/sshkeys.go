package store

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode"

	"golang.org/x/crypto/ssh"
)

// bucketSSHKeys holds every user's SSH public keys: user NUL id -> SSHKey.
// Keying by user first makes one user's keys one prefix scan.
var bucketSSHKeys = []byte("ssh_keys")

// MaxSSHKeysPerUser bounds how many keys one user may hold: enough for every
// laptop and robot a person has, small enough that the duplicate check (a
// scan of the user's keys) and an authorized_keys file stay trivial.
const MaxSSHKeysPerUser = 100

// Key sizes accepted for RSA. Below 2048 bits a key is factorable by a
// determined attacker; above 16384 bits verifying a signature costs more
// than any login is worth, and OpenSSH itself refuses to make such keys.
const (
	minRSABits = 2048
	maxRSABits = 16384
)

// maxSSHKeyLine bounds one authorized_keys line: an RSA key of 16384 bits
// is under 3 KiB in base64, so 8 KiB leaves room for any sane comment.
const maxSSHKeyLine = 8 << 10

// SSHKey is one public key of a user, as they would put it in
// authorized_keys.
type SSHKey struct {
	ID   string `json:"id"`
	User string `json:"user"`
	// Type is the key's algorithm name as it starts the line (ssh-ed25519,
	// ecdsa-sha2-nistp256, ssh-rsa...).
	Type string `json:"type"`
	// Bits is the key's size: 256 for ed25519, the curve's size for
	// ecdsa, the modulus' for rsa.
	Bits int `json:"bits"`
	// Key is the canonical authorized_keys line: type, base64 key and the
	// comment if there is one, separated by single spaces, no options.
	Key string `json:"key"`
	// Fingerprint is the SHA-256 fingerprint as ssh-keygen -l prints it
	// (SHA256:base64 without padding).
	Fingerprint string    `json:"fingerprint"`
	Comment     string    `json:"comment,omitempty"`
	Created     time.Time `json:"created"`
}

const dsaRefusal = "dsa keys are not accepted (1024 bits and SHA-1 only; OpenSSH no longer supports them): use ed25519"

// ParsedSSHKey is what ParseSSHKey makes of one authorized_keys line.
type ParsedSSHKey struct {
	Type, Key, Fingerprint, Comment string
	Bits                            int
}

// ParseSSHKey parses and checks one public key in authorized_keys form
// ("type base64 [comment]"). It accepts ed25519, ecdsa on the NIST curves
// P-256, P-384 and P-521, and rsa of 2048 to 16384 bits; it refuses DSA
// (broken: 1024-bit keys and SHA-1 only), shorter rsa, certificates,
// security-key and any other types, options before the key (rackd writes
// the options of the lines it generates itself), more than one key, and
// control characters in the comment. A refusal is a CodeInvalid error
// whose message starts "ssh key: " and names the problem.
func ParseSSHKey(line string) (ParsedSSHKey, error) {
	bad := func(format string, args ...any) (ParsedSSHKey, error) {
		return ParsedSSHKey{}, errorf(CodeInvalid, "ssh key: "+format, args...)
	}
	line = strings.TrimSpace(line)
	switch {
	case line == "":
		return bad("empty: give a public key such as the contents of ~/.ssh/id_ed25519.pub")
	case len(line) > maxSSHKeyLine:
		return bad("%d bytes long: at most %d", len(line), maxSSHKeyLine)
	case strings.ContainsAny(line, "\r\n"):
		return bad("more than one line: give one key at a time")
	case strings.HasPrefix(line, "-----BEGIN"):
		return bad("this is a private key or a PEM file: give the public key (the .pub file), and keep the private key to yourself")
	}
	pub, comment, options, rest, err := ssh.ParseAuthorizedKey([]byte(line))
	if err != nil {
		// The ssh package no longer knows DSA: it skips such a line as
		// it skips any it cannot read, so say why here.
		if slices.Contains(strings.Fields(line), ssh.KeyAlgoDSA) {
			return bad(dsaRefusal)
		}
		return bad("not a public key in authorized_keys form (type base64 [comment]): %v", err)
	}
	if len(bytes.TrimSpace(rest)) > 0 {
		return bad("more than one key: give one key at a time")
	}
	if len(options) > 0 {
		return bad("options (%s) before the key are not accepted: give the key alone", strings.Join(options, ","))
	}
	for _, r := range comment {
		if unicode.IsControl(r) {
			return bad("the comment holds a control character (%U)", r)
		}
	}
	var bits int
	switch typ := pub.Type(); typ {
	case ssh.KeyAlgoED25519:
		bits = 256
	case ssh.KeyAlgoECDSA256, ssh.KeyAlgoECDSA384, ssh.KeyAlgoECDSA521:
		k, ok := cryptoKey(pub).(*ecdsa.PublicKey)
		if !ok {
			return bad("%s key that is not an ecdsa key", typ)
		}
		bits = k.Curve.Params().BitSize
	case ssh.KeyAlgoRSA:
		k, ok := cryptoKey(pub).(*rsa.PublicKey)
		if !ok {
			return bad("%s key that is not an rsa key", typ)
		}
		bits = k.N.BitLen()
		if bits < minRSABits {
			return bad("rsa key of %d bits: at least %d needed", bits, minRSABits)
		}
		if bits > maxRSABits {
			return bad("rsa key of %d bits: at most %d", bits, maxRSABits)
		}
	case ssh.KeyAlgoDSA:
		return bad(dsaRefusal)
	default:
		if _, isCert := pub.(*ssh.Certificate); isCert {
			return bad("certificates (%s) are not accepted: give the plain public key", typ)
		}
		return bad("type %s is not accepted: use ed25519, ecdsa or rsa of at least %d bits", typ, minRSABits)
	}
	key := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub)))
	comment = strings.TrimSpace(comment)
	if comment != "" {
		key += " " + comment
	}
	return ParsedSSHKey{Type: pub.Type(), Key: key, Fingerprint: ssh.FingerprintSHA256(pub), Comment: comment, Bits: bits}, nil
}

// cryptoKey is the standard library's form of pub, or nil.
func cryptoKey(pub ssh.PublicKey) any {
	if c, ok := pub.(ssh.CryptoPublicKey); ok {
		return c.CryptoPublicKey()
	}
	return nil
}

func newSSHKeyID() string {
	b := make([]byte, 5)
	rand.Read(b) // never fails (crypto/rand panics instead)
	return "k-" + idEncoding.EncodeToString(b)
}

func sshKeyKey(user, id string) []byte { return []byte(user + "\x00" + id) }

// mayManageSSHKeys: a user manages their own keys, an admin anyone's.
func mayManageSSHKeys(actor Actor, user string) error {
	if actor.Admin || actor.Name == user {
		return nil
	}
	return errorf(CodeForbidden, "only an admin may manage another user's ssh keys")
}

// sshKeysOf returns user's keys, oldest first.
func (t *Tx) sshKeysOf(user string) ([]SSHKey, error) {
	var out []SSHKey
	prefix := []byte(user + "\x00")
	c := t.tx.Bucket(bucketSSHKeys).Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		var key SSHKey
		if err := json.Unmarshal(v, &key); err != nil {
			return nil, fmt.Errorf("decode %s/%q: %w", bucketSSHKeys, k, err)
		}
		out = append(out, key)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.Before(out[j].Created)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

func (t *Tx) userExists(name string) (bool, error) {
	return t.get(bucketUsers, []byte(name), &User{})
}

// AddSSHKey parses line (see ParseSSHKey) and adds it to user's keys, in
// one transaction: the user must exist, must not already hold the same key
// (whatever its comment: CodeConflict) and must hold fewer than
// MaxSSHKeysPerUser keys. Two users may hold the same key.
func (s *Store) AddSSHKey(ctx context.Context, actor Actor, user, line string) (SSHKey, error) {
	if err := mayManageSSHKeys(actor, user); err != nil {
		return SSHKey{}, err
	}
	p, err := ParseSSHKey(line)
	if err != nil {
		return SSHKey{}, err
	}
	key := SSHKey{ID: newSSHKeyID(), User: user, Type: p.Type, Bits: p.Bits, Key: p.Key,
		Fingerprint: p.Fingerprint, Comment: p.Comment}
	err = s.update(ctx, func(t *Tx) error {
		if found, err := t.userExists(user); err != nil {
			return err
		} else if !found {
			return errorf(CodeNotFound, "no user %q", user)
		}
		have, err := t.sshKeysOf(user)
		if err != nil {
			return err
		}
		for _, k := range have {
			if k.Fingerprint == key.Fingerprint {
				return errorf(CodeConflict, "ssh key %s is already one of %s's keys (id %s)", key.Fingerprint, user, k.ID)
			}
		}
		if len(have) >= MaxSSHKeysPerUser {
			return errorf(CodeConflict, "user %s already has %d ssh keys, the most one may hold: remove one first", user, len(have))
		}
		key.Created = t.now
		return t.put(bucketSSHKeys, sshKeyKey(user, key.ID), key)
	})
	if err != nil {
		return SSHKey{}, err
	}
	return key, nil
}

// SSHKeys lists user's keys, oldest first.
func (s *Store) SSHKeys(actor Actor, user string) ([]SSHKey, error) {
	if err := mayManageSSHKeys(actor, user); err != nil {
		return nil, err
	}
	var out []SSHKey
	err := s.view(func(t *Tx) error {
		if found, err := t.userExists(user); err != nil {
			return err
		} else if !found {
			return errorf(CodeNotFound, "no user %q", user)
		}
		var err error
		out, err = t.sshKeysOf(user)
		return err
	})
	return out, err
}

// DeleteSSHKey removes one of user's keys and returns it as it was.
func (s *Store) DeleteSSHKey(ctx context.Context, actor Actor, user, id string) (SSHKey, error) {
	if err := mayManageSSHKeys(actor, user); err != nil {
		return SSHKey{}, err
	}
	var key SSHKey
	err := s.update(ctx, func(t *Tx) error {
		if found, err := t.userExists(user); err != nil {
			return err
		} else if !found {
			return errorf(CodeNotFound, "no user %q", user)
		}
		k := sshKeyKey(user, id)
		if found, err := t.get(bucketSSHKeys, k, &key); err != nil {
			return err
		} else if !found {
			return errorf(CodeNotFound, "user %s has no ssh key %q", user, id)
		}
		return t.del(bucketSSHKeys, k)
	})
	if err != nil {
		return SSHKey{}, err
	}
	return key, nil
}

// checkSSHKeys verifies the ssh_keys bucket for Check: every key is stored
// under its user and id, belongs to an existing user, is a key ParseSSHKey
// accepts whose canonical form and fingerprint are the ones stored, and no
// user holds the same key twice or more than MaxSSHKeysPerUser keys.
func (t *Tx) checkSSHKeys(bad func(string, ...any)) {
	seen := map[string]string{} // user NUL fingerprint -> id
	count := map[string]int{}
	t.tx.Bucket(bucketSSHKeys).ForEach(func(k, v []byte) error {
		var key SSHKey
		if err := json.Unmarshal(v, &key); err != nil {
			bad("ssh key %q: undecodable: %v", k, err)
			return nil
		}
		if string(k) != string(sshKeyKey(key.User, key.ID)) {
			bad("ssh key %s of user %s stored under key %q", key.ID, key.User, k)
		}
		if found, err := t.userExists(key.User); err != nil || !found {
			bad("ssh key %s belongs to user %s, who does not exist", key.ID, key.User)
		}
		p, err := ParseSSHKey(key.Key)
		switch {
		case err != nil:
			bad("ssh key %s of user %s: %v", key.ID, key.User, err)
		case p.Key != key.Key || p.Fingerprint != key.Fingerprint || p.Type != key.Type || p.Comment != key.Comment || p.Bits != key.Bits:
			bad("ssh key %s of user %s: stored as %s %s (%d bits), the key itself is %s %s (%d bits)",
				key.ID, key.User, key.Type, key.Fingerprint, key.Bits, p.Type, p.Fingerprint, p.Bits)
		}
		dup := key.User + "\x00" + key.Fingerprint
		if other, ok := seen[dup]; ok {
			bad("ssh keys %s and %s of user %s are the same key %s", other, key.ID, key.User, key.Fingerprint)
		}
		seen[dup] = key.ID
		count[key.User]++
		return nil
	})
	for user, n := range count {
		if n > MaxSSHKeysPerUser {
			bad("user %s holds %d ssh keys, more than %d", user, n, MaxSSHKeysPerUser)
		}
	}
}
