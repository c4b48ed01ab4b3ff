package maasapi

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
)

// Form decoding. MAAS's clients send parameters two ways: the Go clients
// (gomaasapi, gomaasclient) as application/x-www-form-urlencoded, and
// python-libmaas, the maas CLI and Ansible as multipart/form-data, where a
// part with a file name is a file (files/ add) and any other part is a
// value. A GET carries its parameters in the query; a POST or PUT in its
// body (and op, and sometimes more, in the query: both are read). Bodies
// are bounded: too large is a 413, malformed is a 400, and nothing is read
// past the bound.

// maxFormValues bounds the parameters of one request, whatever their size.
const maxFormValues = 1000

// form is a request's decoded parameters.
type form struct {
	values url.Values
	files  map[string][]*multipart.FileHeader
	// cleanup removes what multipart decoding kept on disk (nothing, with
	// maxMemory at the body bound, but the call is cheap).
	cleanup func()
}

// errBodyTooLarge is a body over its bound.
type errBodyTooLarge struct{ limit int64 }

func (e errBodyTooLarge) Error() string {
	return fmt.Sprintf("the request body is larger than %d bytes", e.limit)
}

// decodeForm reads the parameters of a request body of the given content
// type, at most limit bytes of it. An empty content type with an empty body
// is no parameters.
func decodeForm(contentType string, body io.Reader, limit int64) (form, error) {
	f := form{values: url.Values{}, files: map[string][]*multipart.FileHeader{}, cleanup: func() {}}
	lr := &boundedReader{r: body, left: limit, limit: limit}
	mt, params := "", map[string]string{}
	if contentType != "" {
		var err error
		mt, params, err = mime.ParseMediaType(contentType)
		if err != nil {
			return f, fmt.Errorf("malformed Content-Type %q: %v", truncate(contentType, 64), err)
		}
	}
	switch mt {
	case "application/x-www-form-urlencoded":
		b, err := io.ReadAll(lr)
		if err != nil {
			return f, err
		}
		vs, err := url.ParseQuery(string(b))
		if err != nil {
			return f, fmt.Errorf("malformed urlencoded body: %v", err)
		}
		if n := countValues(vs); n > maxFormValues {
			return f, fmt.Errorf("the body has %d parameters: at most %d", n, maxFormValues)
		}
		f.values = vs
	case "multipart/form-data":
		boundary := params["boundary"]
		if boundary == "" {
			return f, errors.New("multipart/form-data without a boundary")
		}
		body, boundary, err := decodeTransferEncodings(lr, boundary)
		if err != nil {
			var tl errBodyTooLarge
			if errors.As(err, &tl) {
				return f, tl
			}
			return f, fmt.Errorf("malformed multipart body: %v", err)
		}
		mf, err := multipart.NewReader(body, boundary).ReadForm(limit)
		if err != nil {
			var tl errBodyTooLarge
			if errors.As(err, &tl) {
				return f, tl
			}
			if errors.Is(err, multipart.ErrMessageTooLarge) {
				return f, errBodyTooLarge{limit}
			}
			return f, fmt.Errorf("malformed multipart body: %v", err)
		}
		f.cleanup = func() { mf.RemoveAll() }
		n := 0
		for k, vs := range mf.Value {
			f.values[k] = vs
			n += len(vs)
		}
		for k, fs := range mf.File {
			f.files[k] = fs
			n += len(fs)
		}
		if n > maxFormValues {
			f.cleanup()
			return f, fmt.Errorf("the body has %d parameters: at most %d", n, maxFormValues)
		}
	case "":
		// No type: only an empty body is understood.
		var one [1]byte
		if n, _ := io.ReadFull(lr, one[:]); n > 0 {
			return f, errors.New("a request body without a Content-Type: send application/x-www-form-urlencoded or multipart/form-data")
		}
	case "application/json":
		return f, errors.New("MAAS's API takes form parameters, not JSON: send application/x-www-form-urlencoded or multipart/form-data")
	default:
		return f, fmt.Errorf("content type %q is not accepted: send application/x-www-form-urlencoded or multipart/form-data", truncate(mt, 64))
	}
	return f, nil
}

// decodeTransferEncodings rewrites a multipart body whose parts carry
// Content-Transfer-Encoding: base64 (python-libmaas encodes every part so,
// as Django reads it) into one of plain parts, which mime/multipart's
// ReadForm reads (it decodes quoted-printable only). The body is read
// whole, through r's bound; at most maxFormValues+1 parts.
func decodeTransferEncodings(r io.Reader, boundary string) (io.Reader, string, error) {
	mr := multipart.NewReader(r, boundary)
	var out bytes.Buffer
	w := multipart.NewWriter(&out)
	for n := 0; ; n++ {
		p, err := mr.NextPart()
		if err == io.EOF { // the closing boundary (a body cut short is a wrapped EOF)
			break
		}
		if err != nil {
			return nil, "", err
		}
		if n > maxFormValues {
			return nil, "", fmt.Errorf("more than %d parts", maxFormValues)
		}
		var content io.Reader = p
		if strings.EqualFold(strings.TrimSpace(p.Header.Get("Content-Transfer-Encoding")), "base64") {
			// MIME's base64 has line breaks, which the decoder skips.
			content = base64.NewDecoder(base64.StdEncoding, p)
		}
		h := textproto.MIMEHeader{}
		for _, k := range []string{"Content-Disposition", "Content-Type"} {
			if v := p.Header.Get(k); v != "" {
				h.Set(k, v)
			}
		}
		pw, err := w.CreatePart(h)
		if err != nil {
			return nil, "", err
		}
		if _, err := io.Copy(pw, content); err != nil {
			return nil, "", fmt.Errorf("part %d: %w", n, err)
		}
	}
	if err := w.Close(); err != nil {
		return nil, "", err
	}
	return &out, w.Boundary(), nil
}

// readForm decodes a request's parameters: its query (op left out) and,
// but for a GET or DELETE, its body. A body value wins over the query's.
func readForm(r *http.Request, limit int64) (form, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return form{cleanup: func() {}}, fmt.Errorf("malformed query string: %v", err)
	}
	if n := countValues(q); n > maxFormValues {
		return form{cleanup: func() {}}, fmt.Errorf("the query has %d parameters: at most %d", n, maxFormValues)
	}
	f := form{values: url.Values{}, cleanup: func() {}}
	if r.Method != http.MethodGet && r.Method != http.MethodHead && r.Method != http.MethodDelete {
		if f, err = decodeForm(r.Header.Get("Content-Type"), r.Body, limit); err != nil {
			return f, err
		}
	}
	for k, vs := range q {
		if _, ok := f.values[k]; !ok {
			f.values[k] = vs
		}
	}
	return f, nil
}

func countValues(vs url.Values) int {
	n := 0
	for _, v := range vs {
		n += len(v)
	}
	return n
}

// boundedReader reads at most limit bytes and fails with errBodyTooLarge
// on the byte after.
type boundedReader struct {
	r     io.Reader
	left  int64
	limit int64
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, errBodyTooLarge{b.limit}
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return n - 1, errBodyTooLarge{b.limit}
	}
	return n, err
}
