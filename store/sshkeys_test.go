package store_test

import (
	"context"
	"crypto/dsa"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"math/big"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"rackd/store"
	"rackd/store/storetest"
)

// dsaKey makes an ssh-dss public key line.
func dsaKey(t *testing.T) string {
	t.Helper()
	var k dsa.PrivateKey
	if err := dsa.GenerateParameters(&k.Parameters, rand.Reader, dsa.L1024N160); err != nil {
		t.Fatal(err)
	}
	if err := dsa.GenerateKey(&k, rand.Reader); err != nil {
		t.Fatal(err)
	}
	// The ssh package no longer makes DSA keys, so the wire form is
	// written here: the type and the mpints p, q, g, y (RFC 4253 6.6).
	wire := ssh.Marshal(struct {
		Name       string
		P, Q, G, Y *big.Int
	}{ssh.KeyAlgoDSA, k.P, k.Q, k.G, k.Y})
	return ssh.KeyAlgoDSA + " " + base64.StdEncoding.EncodeToString(wire) + " old"
}

// certKey makes an ed25519 user certificate line.
func certKey(t *testing.T) string {
	t.Helper()
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	_, caKey, _ := ed25519.GenerateKey(rand.Reader)
	sp, _ := ssh.NewPublicKey(pub)
	signer, err := ssh.NewSignerFromKey(caKey)
	if err != nil {
		t.Fatal(err)
	}
	cert := &ssh.Certificate{Key: sp, CertType: ssh.UserCert, KeyId: "alice", ValidPrincipals: []string{"alice"}, ValidBefore: ssh.CertTimeInfinity}
	if err := cert.SignCert(rand.Reader, signer); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(cert)))
}

// skKey makes a FIDO security-key ed25519 line (sk-ssh-ed25519@openssh.com).
func skKey(t *testing.T) string {
	t.Helper()
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	wire := ssh.Marshal(struct {
		Name, Key, App string
	}{ssh.KeyAlgoSKED25519, string(pub), "ssh:"})
	return ssh.KeyAlgoSKED25519 + " " + base64.StdEncoding.EncodeToString(wire) + " yubikey"
}

func TestParseSSHKey(t *testing.T) {
	ed := storetest.SSHKey(t, "ed25519", 0, "")
	tests := map[string]struct {
		line string
		typ  string
		bits int
		err  string // a part of the refusal; "" for success
	}{
		"ed25519":                 {line: ed + " alice@laptop", typ: "ssh-ed25519", bits: 256},
		"ed25519 without comment": {line: ed, typ: "ssh-ed25519", bits: 256},
		"ecdsa 256":               {line: storetest.SSHKey(t, "ecdsa", 256, "c"), typ: "ecdsa-sha2-nistp256", bits: 256},
		"ecdsa 384":               {line: storetest.SSHKey(t, "ecdsa", 384, "c"), typ: "ecdsa-sha2-nistp384", bits: 384},
		"ecdsa 521":               {line: storetest.SSHKey(t, "ecdsa", 521, "c"), typ: "ecdsa-sha2-nistp521", bits: 521},
		"rsa 2048":                {line: storetest.SSHKey(t, "rsa", 2048, "c"), typ: "ssh-rsa", bits: 2048},
		"rsa 3072":                {line: storetest.SSHKey(t, "rsa", 3072, "c"), typ: "ssh-rsa", bits: 3072},
		"surrounding blanks":      {line: "  " + ed + " c \n", typ: "ssh-ed25519", bits: 256},
		"rsa 1024":                {line: storetest.SSHKey(t, "rsa", 1024, "c"), err: "ssh key: rsa key of 1024 bits: at least 2048 needed"},
		"dsa":                     {line: dsaKey(t), err: "ssh key: dsa keys are not accepted"},
		"certificate":             {line: certKey(t), err: "ssh key: certificates (ssh-ed25519-cert-v01@openssh.com) are not accepted"},
		"security key":            {line: skKey(t), err: "ssh key: type sk-ssh-ed25519@openssh.com is not accepted"},
		"options":                 {line: `from="10.0.0.0/8" ` + ed, err: `ssh key: options (from="10.0.0.0/8") before the key`},
		"two keys":                {line: ed + " a\n" + ed + " b", err: "ssh key: more than one line"},
		"empty":                   {line: " \n", err: "ssh key: empty"},
		"garbage":                 {line: "hello world", err: "ssh key: not a public key"},
		"bad base64":              {line: "ssh-ed25519 AAAA%%%% c", err: "ssh key: not a public key"},
		"type differs from blob":  {line: "ssh-rsa " + strings.Fields(ed)[1], err: "ssh key: not a public key"},
		"private key":             {line: "-----BEGIN OPENSSH PRIVATE KEY-----", err: "ssh key: this is a private key"},
		"control in comment":      {line: ed + " a\x07b", err: "ssh key: the comment holds a control character"},
		"too long":                {line: ed + " " + strings.Repeat("x", 9000), err: "bytes long: at most"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p, err := store.ParseSSHKey(tc.line)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || store.CodeOf(err) != store.CodeInvalid {
					t.Fatalf("ParseSSHKey = %+v, %v; want a %s refusal with %q", p, err, store.CodeInvalid, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseSSHKey: %v", err)
			}
			f := strings.Fields(strings.TrimSpace(tc.line))
			want := strings.Join(f, " ")
			if p.Type != tc.typ || p.Bits != tc.bits || p.Key != want || p.Comment != strings.Join(f[2:], " ") {
				t.Fatalf("ParseSSHKey = %+v; want type %s, %d bits, key %q", p, tc.typ, tc.bits, want)
			}
			pub, _, _, _, _ := ssh.ParseAuthorizedKey([]byte(tc.line))
			if p.Fingerprint != ssh.FingerprintSHA256(pub) || !strings.HasPrefix(p.Fingerprint, "SHA256:") {
				t.Fatalf("fingerprint %s, want %s", p.Fingerprint, ssh.FingerprintSHA256(pub))
			}
		})
	}
}

func TestSSHKeys(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	bob := store.Actor{Name: "bob"}
	for _, u := range []string{"alice", "bob"} {
		if _, _, err := s.CreateUser(ctx, admin, u, false, ""); err != nil {
			t.Fatal(err)
		}
	}
	ed := storetest.SSHKey(t, "ed25519", 0, "")
	k1, err := s.AddSSHKey(ctx, alice, "alice", ed+" alice@laptop")
	if err != nil {
		t.Fatal(err)
	}
	if k1.User != "alice" || k1.Comment != "alice@laptop" || k1.Key != ed+" alice@laptop" || !strings.HasPrefix(k1.ID, "k-") || k1.Created.IsZero() {
		t.Fatalf("added %+v", k1)
	}
	// The same key material under another comment is the same key.
	if _, err := s.AddSSHKey(ctx, alice, "alice", ed+" other comment"); store.CodeOf(err) != store.CodeConflict || !strings.Contains(err.Error(), k1.ID) {
		t.Fatalf("duplicate with another comment: %v, want %s naming %s", err, store.CodeConflict, k1.ID)
	}
	// Another user may hold the same key (a shared robot key, say).
	kb, err := s.AddSSHKey(ctx, bob, "bob", ed)
	if err != nil {
		t.Fatalf("same key for another user: %v", err)
	}
	// An admin manages anyone's keys.
	k2, err := s.AddSSHKey(ctx, admin, "alice", storetest.SSHKey(t, "ecdsa", 256, "by admin"))
	if err != nil {
		t.Fatal(err)
	}
	other := storetest.SSHKey(t, "ed25519", 0, "")
	short := storetest.SSHKey(t, "rsa", 1024, "")
	refusals := []struct {
		name string
		code store.Code
		do   func() error
	}{
		{"bob adds to alice's", store.CodeForbidden, func() error { _, err := s.AddSSHKey(ctx, bob, "alice", other); return err }},
		{"bob lists alice's", store.CodeForbidden, func() error { _, err := s.SSHKeys(bob, "alice"); return err }},
		{"bob removes alice's", store.CodeForbidden, func() error { _, err := s.DeleteSSHKey(ctx, bob, "alice", k1.ID); return err }},
		{"bob removes alice's key as his", store.CodeNotFound, func() error { _, err := s.DeleteSSHKey(ctx, bob, "bob", k1.ID); return err }},
		{"add for no such user", store.CodeNotFound, func() error { _, err := s.AddSSHKey(ctx, admin, "carol", other); return err }},
		{"list of no such user", store.CodeNotFound, func() error { _, err := s.SSHKeys(admin, "carol"); return err }},
		{"remove from no such user", store.CodeNotFound, func() error { _, err := s.DeleteSSHKey(ctx, admin, "carol", k1.ID); return err }},
		{"short rsa", store.CodeInvalid, func() error { _, err := s.AddSSHKey(ctx, alice, "alice", short); return err }},
	}
	for _, r := range refusals {
		if err := r.do(); store.CodeOf(err) != r.code {
			t.Errorf("%s: %v, want %s", r.name, err, r.code)
		}
	}

	keys, err := s.SSHKeys(alice, "alice")
	if err != nil || len(keys) != 2 || keys[0].ID != k1.ID || keys[1].ID != k2.ID {
		t.Fatalf("alice's keys: %+v %v; want %s then %s", keys, err, k1.ID, k2.ID)
	}
	gone, err := s.DeleteSSHKey(ctx, alice, "alice", k1.ID)
	if err != nil || gone.ID != k1.ID {
		t.Fatalf("delete: %+v %v", gone, err)
	}
	if _, err := s.DeleteSSHKey(ctx, alice, "alice", k1.ID); store.CodeOf(err) != store.CodeNotFound {
		t.Fatalf("delete twice: %v", err)
	}
	keys, _ = s.SSHKeys(alice, "alice")
	if len(keys) != 1 || keys[0].ID != k2.ID {
		t.Fatalf("alice's keys after delete: %+v", keys)
	}
	// Bob's copy of the key is his own and stays.
	if keys, _ := s.SSHKeys(bob, "bob"); len(keys) != 1 || keys[0].ID != kb.ID {
		t.Fatalf("bob's keys: %+v", keys)
	}
	// Once removed, the key may be added again.
	if _, err := s.AddSSHKey(ctx, alice, "alice", ed); err != nil {
		t.Fatalf("add again after delete: %v", err)
	}
}

func TestSSHKeysLimit(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	if _, _, err := s.CreateUser(ctx, admin, "alice", false, ""); err != nil {
		t.Fatal(err)
	}
	for i := range store.MaxSSHKeysPerUser {
		if _, err := s.AddSSHKey(ctx, alice, "alice", storetest.SSHKey(t, "ed25519", 0, fmt.Sprint("key ", i))); err != nil {
			t.Fatalf("key %d: %v", i, err)
		}
	}
	_, err := s.AddSSHKey(ctx, alice, "alice", storetest.SSHKey(t, "ed25519", 0, "one too many"))
	if store.CodeOf(err) != store.CodeConflict || !strings.Contains(err.Error(), "the most one may hold") {
		t.Fatalf("key %d: %v, want a %s refusal", store.MaxSSHKeysPerUser+1, err, store.CodeConflict)
	}
}
