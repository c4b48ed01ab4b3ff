package appliance

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestBundleRoundTrip(t *testing.T) {
	pub, priv := testKey(t)
	payload := testPayload(3<<20 + 17)
	raw := makeBundle(t, priv, "v0.3.0-12-gabc", 1764633600, "amd64", payload)
	// One byte at a time: the reader must not depend on read sizes.
	b, err := ReadBundle(iotest.OneByteReader(bytes.NewReader(raw)), pub)
	if err != nil {
		t.Fatal(err)
	}
	if b.Manifest.Version != "v0.3.0-12-gabc" || b.Manifest.Build != 1764633600 || b.Manifest.Arch != "amd64" || b.Manifest.PayloadSize != int64(len(payload)) || b.Manifest.Format != 1 {
		t.Fatalf("manifest %+v", b.Manifest)
	}
	got, err := io.ReadAll(b.Payload)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, payload) {
		t.Fatal("payload differs")
	}
	// The manifest is the JSON the contract names.
	var m map[string]any
	if err := json.Unmarshal(b.RawManifest, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"format", "version", "build", "arch", "payload_size", "payload_sha256"} {
		if _, ok := m[k]; !ok {
			t.Errorf("manifest has no %q: %s", k, b.RawManifest)
		}
	}
}

// signedManifest is manifest JSON and its signature, for hand-made bundles.
func signedManifest(t *testing.T, priv []byte, m any) ([]byte, []byte) {
	t.Helper()
	mb, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return mb, SignManifest(priv, mb)
}

func TestReadBundleRefuses(t *testing.T) {
	pub, priv := testKey(t)
	_, other := testKey(t)
	payload := testPayload(100000)
	good := makeBundle(t, priv, "v1", 10, "amd64", payload)
	n, sum, _ := DigestPayload(bytes.NewReader(payload))
	okManifest := Manifest{Format: 1, Version: "v1", Build: 10, Arch: "amd64", PayloadSize: n, PayloadSHA256: sum}
	mb, sig := signedManifest(t, priv, okManifest)
	hdr := len(Magic) + 4 + len(mb) + SignatureSize

	wrongSum := okManifest
	wrongSum.PayloadSHA256 = strings.Repeat("0", 64)
	wmb, wsig := signedManifest(t, priv, wrongSum)
	format2 := okManifest
	format2.Format = 2
	f2mb, f2sig := signedManifest(t, priv, format2)
	noVersion := okManifest
	noVersion.Version = ""
	nvmb, nvsig := signedManifest(t, priv, noVersion)
	notJSON := []byte("{not json")
	flipped := append([]byte(nil), good...)
	flipped[len(Magic)+4+5] ^= 1

	cases := []struct {
		name string
		data []byte
		// header: ReadBundle itself fails; else the payload reader does.
		header bool
		want   error
	}{
		{"empty", nil, true, ErrTruncated},
		{"bad magic", append([]byte("RKDBNDL2"), good[8:]...), true, ErrNotBundle},
		{"not a bundle", []byte("hello world, this is not a bundle at all"), true, ErrNotBundle},
		{"manifest length 0", rawBundle(Magic, 0, nil, nil, nil), true, ErrManifestSize},
		{"manifest length too large", rawBundle(Magic, MaxManifestSize+1, nil, nil, nil), true, ErrManifestSize},
		{"manifest length huge", rawBundle(Magic, 0xffffffff, nil, nil, nil), true, ErrManifestSize},
		{"truncated in length", good[:10], true, ErrTruncated},
		{"truncated in manifest", good[:len(Magic)+4+3], true, ErrTruncated},
		{"truncated in signature", good[:hdr-1], true, ErrTruncated},
		{"unsigned", rawBundle(Magic, uint32(len(mb)), mb, make([]byte, 64), payload), true, ErrBadSignature},
		{"other key", makeBundle(t, other, "v1", 10, "amd64", payload), true, ErrBadSignature},
		{"manifest changed after signing", flipped, true, ErrBadSignature},
		{"signed garbage manifest", rawBundle(Magic, uint32(len(notJSON)), notJSON, SignManifest(priv, notJSON), payload), true, ErrBadManifest},
		{"signed format 2", rawBundle(Magic, uint32(len(f2mb)), f2mb, f2sig, payload), true, ErrBadManifest},
		{"signed manifest without version", rawBundle(Magic, uint32(len(nvmb)), nvmb, nvsig, payload), true, ErrBadManifest},
		{"truncated payload", good[:len(good)-1], false, ErrTruncated},
		{"payload absent", good[:hdr], false, ErrTruncated},
		{"payload of 10 bytes", rawBundle(Magic, uint32(len(mb)), mb, sig, payload[:10]), false, ErrTruncated},
		{"trailing byte", append(append([]byte(nil), good...), 0), false, ErrTrailingData},
		{"another bundle after", append(append([]byte(nil), good...), good...), false, ErrTrailingData},
		{"payload changed", func() []byte { b := append([]byte(nil), good...); b[len(b)-100] ^= 0x80; return b }(), false, ErrPayloadDigest},
		{"payload digest wrong in manifest", rawBundle(Magic, uint32(len(wmb)), wmb, wsig, payload), false, ErrPayloadDigest},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := ReadBundle(bytes.NewReader(c.data), pub)
			if c.header {
				if !errors.Is(err, c.want) {
					t.Fatalf("ReadBundle: %v, want %v", err, c.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("ReadBundle: %v", err)
			}
			_, err = io.Copy(io.Discard, b.Payload)
			if !errors.Is(err, c.want) {
				t.Fatalf("payload: %v, want %v", err, c.want)
			}
			// The error sticks.
			if _, err2 := b.Payload.Read(make([]byte, 10)); !errors.Is(err2, c.want) {
				t.Fatalf("second read: %v", err2)
			}
		})
	}
}

// A reader error inside the payload is that error, not a truncation.
func TestReadBundleReaderError(t *testing.T) {
	pub, priv := testKey(t)
	good := makeBundle(t, priv, "v1", 1, "amd64", testPayload(5000))
	boom := errors.New("boom")
	r := io.MultiReader(bytes.NewReader(good[:len(good)-10]), iotest.ErrReader(boom))
	b, err := ReadBundle(r, pub)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, b.Payload); !errors.Is(err, boom) || errors.Is(err, ErrTruncated) {
		t.Fatalf("got %v", err)
	}
}

func TestWriteBundleChecksPayload(t *testing.T) {
	_, priv := testKey(t)
	payload := testPayload(1000)
	n, sum, _ := DigestPayload(bytes.NewReader(payload))
	m := Manifest{Version: "v", Build: 1, Arch: "amd64", PayloadSize: n, PayloadSHA256: sum}
	for name, c := range map[string]struct {
		m       Manifest
		payload []byte
	}{
		"short":        {m, payload[:999]},
		"long":         {m, append(append([]byte(nil), payload...), 1)},
		"other digest": {m, testPayload(1001)[1:]},
		"no version":   {Manifest{Build: 1, Arch: "amd64", PayloadSize: n, PayloadSHA256: sum}, payload},
		"bad sha":      {Manifest{Version: "v", Build: 1, Arch: "amd64", PayloadSize: n, PayloadSHA256: "xyz"}, payload},
		"zero build":   {Manifest{Version: "v", Arch: "amd64", PayloadSize: n, PayloadSHA256: sum}, payload},
	} {
		t.Run(name, func(t *testing.T) {
			if err := WriteBundle(io.Discard, priv, c.m, bytes.NewReader(c.payload)); err == nil {
				t.Fatal("WriteBundle accepted it")
			}
		})
	}
}

// FuzzReadBundle: no input makes the reader panic, loop or accept a payload
// the manifest does not sign; what it accepts is exactly a good bundle.
func FuzzReadBundle(f *testing.F) {
	pub, priv := testKey(f)
	payload := testPayload(300)
	good := makeBundle(f, priv, "v1", 1, "amd64", payload)
	f.Add(good)
	f.Add(good[:40])
	f.Add(append(append([]byte(nil), good...), 'x'))
	f.Add([]byte(Magic + "\x00\x00\x00\x02{}"))
	f.Add([]byte(Magic + "\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := ReadBundle(bytes.NewReader(data), pub)
		if err != nil {
			return
		}
		got, err := io.ReadAll(b.Payload)
		if err != nil {
			return
		}
		// Only the one signed bundle (its manifest, its payload) gets
		// through: ed25519 signatures cannot be forged by a fuzzer.
		if !bytes.Equal(data, good) || !bytes.Equal(got, payload) {
			t.Fatalf("accepted a bundle that is not the signed one (%d bytes)", len(data))
		}
	})
}
