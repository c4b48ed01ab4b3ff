package maasapi

import (
	"bytes"
	"testing"
)

// FuzzParseOAuth: any header is parsed or refused with an error, never a
// panic; a parsed header's secret check is total too.
func FuzzParseOAuth(f *testing.F) {
	f.Add(oauthHeader("alice:t-abc:s3cret"))
	f.Add(`OAuth oauth_version="1.0", oauth_signature_method="PLAINTEXT", oauth_consumer_key="a", oauth_token="b", oauth_signature="%26c"`)
	f.Add(`OAuth realm="", oauth_token="a,b", oauth_signature="&&"`)
	f.Add(`oauth x="`)
	f.Add(`OAuth ,`)
	f.Fuzz(func(t *testing.T, h string) {
		p, err := parseOAuth(h)
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("an error without words for %q", h)
			}
			return
		}
		if len(h) > maxAuthHeader {
			t.Fatalf("a header of %d bytes parsed", len(h))
		}
		if secret, err := p.tokenSecret(); err == nil && (secret == "" || p.consumerKey == "" || p.token == "") {
			t.Fatalf("a key with an empty part accepted from %q: %+v", h, p)
		}
	})
}

// FuzzDecodeForm: any body of either encoding is decoded within its bound
// or refused, never a panic.
func FuzzDecodeForm(f *testing.F) {
	f.Add("application/x-www-form-urlencoded", []byte("name=a&tags=x,y&mem=1"))
	f.Add("multipart/form-data; boundary=b", []byte("--b\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n--b--\r\n"))
	f.Add("multipart/form-data; boundary=b", []byte("--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n\r\nxyz\r\n--b--\r\n"))
	f.Add("", []byte(""))
	py, pyType := pythonMultipart([][2]string{{"name", "n1"}}, [2]string{"file", "x"})
	f.Add(pyType, py)
	f.Fuzz(func(t *testing.T, ctype string, body []byte) {
		const limit = 4096
		fm, err := decodeForm(ctype, bytes.NewReader(body), limit)
		if err != nil {
			return
		}
		defer fm.cleanup()
		if len(body) > limit {
			t.Fatalf("a body of %d bytes accepted over a bound of %d", len(body), limit)
		}
		if countValues(fm.values) > maxFormValues {
			t.Fatalf("%d values accepted", countValues(fm.values))
		}
	})
}

// FuzzParseStorage: allocate's storage= is parsed or refused, never a
// panic; what is parsed has a positive size and a label each, no two alike.
func FuzzParseStorage(f *testing.F) {
	for _, s := range []string{"root:20", "root:20,data:100(ssd,fast)", "10,20", "x:1.5", "a:(", "((", "0:0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		specs, err := parseStorage(v)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, sp := range specs {
			if sp.bytes <= 0 || seen[sp.label] {
				t.Fatalf("%q: spec %+v", v, sp)
			}
			seen[sp.label] = true
		}
	})
}
