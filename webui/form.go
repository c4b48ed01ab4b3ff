package webui

import (
	"bufio"
	"bytes"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"

	"rackd/api"
	"rackd/internal/reqbody"
)

// The caps of the forms' bodies: the largest each form legitimately sends.
const (
	// formBytes is every form's but the machine action's: a few short
	// fields (a bulk action's thousand machine ids fit in 16 KiB).
	formBytes = 64 << 10
	// loginFormBytes is the login's: its anti-forgery value, the
	// destination and a token.
	loginFormBytes = 16 << 10
	// actionFormBytes is the machine action form's: a deploy uploads
	// user-data of up to api.MaxUserData and pastes authorized keys.
	actionFormBytes = api.MaxUserData + 512<<10
	// firstFieldBytes bounds the first field, read before the rest:
	// the anti-forgery value.
	firstFieldBytes = 1 << 10
	// maxFormFields bounds the fields of one form, whatever their size.
	maxFormFields = 2000
)

// errCSRF is a form whose anti-forgery value is missing or wrong.
var errCSRF = errors.New("the form's anti-forgery value is missing or wrong")

// readForm reads a form's body (urlencoded or multipart) into r.PostForm
// (and r.Form), at most limit bytes of it, holding the body's share of the
// budget of bodies read at once (the gate's) only while it reads. The
// anti-forgery value is checked first, against want: from the X-CSRF-Token
// header when the request has one (a script's), else from the body's first
// field, which must be csrf and is read before anything else: a wrong one
// is errCSRF before the rest of the body is read. Multipart parts with a
// file name are returned by field name, the rest are values; nothing goes
// to disk. The errors are errCSRF, reqbody.ErrBusy, an *http.MaxBytesError
// (over limit, often before reading: the declared length says so), or a
// malformed body.
func (u *UI) readForm(w http.ResponseWriter, r *http.Request, limit int64, want string) (files map[string][]byte, err error) {
	fromHeader := r.Header.Get("X-CSRF-Token")
	if want == "" {
		return nil, errCSRF
	}
	if fromHeader != "" && !same(fromHeader, want) {
		return nil, errCSRF
	}
	release, err := u.bodies.Admit(w, r, limit)
	defer release()
	if err != nil {
		return nil, err
	}
	check := fromHeader == ""
	values := url.Values{}
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch mt {
	case "multipart/form-data":
		if params["boundary"] == "" {
			return nil, errors.New("multipart/form-data without a boundary")
		}
		files, err = u.readMultipart(multipart.NewReader(r.Body, params["boundary"]), values, limit, check, want)
		if err != nil {
			return nil, err
		}
	case "application/x-www-form-urlencoded":
		if err := u.readURLEncoded(r.Body, values, limit, check, want); err != nil {
			return nil, err
		}
	default:
		// No form: nothing is read; only a header can have carried
		// the anti-forgery value.
		if check {
			return nil, errCSRF
		}
	}
	r.PostForm, r.Form = values, nil
	r.ParseForm() // r.Form: the values and the query; the body is not read again
	// r.FormFile finds nothing (the files are returned) and never parses
	// the body again.
	r.MultipartForm = &multipart.Form{Value: values, File: map[string][]*multipart.FileHeader{}}
	return files, nil
}

func same(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// readURLEncoded reads an urlencoded body into values: when check, its
// first field (csrf=want) first, from a small buffer, then the rest.
func (u *UI) readURLEncoded(body io.Reader, values url.Values, limit int64, check bool, want string) error {
	rest := body
	if check {
		br := bufio.NewReaderSize(body, firstFieldBytes)
		first, err := br.ReadSlice('&')
		if err != nil && !errors.Is(err, io.EOF) {
			if errors.Is(err, bufio.ErrBufferFull) {
				return errCSRF // the first field is too long to be the value
			}
			return err
		}
		k, v, _ := bytes.Cut(bytes.TrimSuffix(first, []byte("&")), []byte("="))
		val, uerr := url.QueryUnescape(string(v))
		if string(k) != "csrf" || uerr != nil || !same(val, want) {
			return errCSRF
		}
		values.Set("csrf", val)
		rest = br
	}
	b, err := u.bodies.ReadAll(rest, limit)
	defer b.Free()
	if err != nil {
		return err
	}
	vs, err := url.ParseQuery(string(b.Bytes()))
	if err != nil {
		return fmt.Errorf("malformed form: %w", err)
	}
	n := 0
	for k, v := range vs {
		if n += len(v); n > maxFormFields {
			return fmt.Errorf("the form has more than %d fields", maxFormFields)
		}
		values[k] = append(values[k], v...)
	}
	return nil
}

// readMultipart reads a multipart body part by part into values and the
// returned files: when check, the first part must be csrf=want, and a
// wrong one stops the reading there. Each part goes through a buffer of
// the gate's pool, capped by the body's own cap.
func (u *UI) readMultipart(mr *multipart.Reader, values url.Values, limit int64, check bool, want string) (map[string][]byte, error) {
	files := map[string][]byte{}
	for n := 0; ; n++ {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			if check && n == 0 {
				return nil, errCSRF
			}
			return files, nil
		}
		if err != nil {
			return nil, err
		}
		if n >= maxFormFields {
			return nil, fmt.Errorf("the form has more than %d fields", maxFormFields)
		}
		name := p.FormName()
		if check && n == 0 {
			if name != "csrf" || p.FileName() != "" {
				return nil, errCSRF
			}
			b, err := u.bodies.ReadAll(p, firstFieldBytes)
			ok := err == nil && same(string(b.Bytes()), want)
			b.Free()
			if !ok {
				return nil, errCSRF
			}
			values.Set("csrf", want)
			continue
		}
		b, err := u.bodies.ReadAll(p, limit)
		if err != nil {
			b.Free()
			return nil, err
		}
		switch {
		case name == "":
		case p.FileName() != "":
			files[name] = bytes.Clone(b.Bytes())
		default:
			values.Add(name, string(b.Bytes()))
		}
		b.Free()
	}
}

// formError answers a form that could not be read: too large (413),
// refused for want of room (503), or malformed (400).
func (u *UI) formError(w http.ResponseWriter, r *http.Request, s *reqSession, err error) {
	if limit, ok := reqbody.TooLarge(err); ok {
		u.renderStatus(w, r, s, http.StatusRequestEntityTooLarge, "Too large",
			fmt.Sprintf("The form is larger than %d bytes: refused.", limit))
		return
	}
	if errors.Is(err, reqbody.ErrBusy) {
		w.Header().Set("Retry-After", strconv.Itoa(1))
		u.renderStatus(w, r, s, http.StatusServiceUnavailable, "Busy", "rackd is reading many forms at once: send this one again in a moment.")
		return
	}
	if r.Context().Err() != nil {
		return // the browser went away
	}
	u.renderStatus(w, r, s, http.StatusBadRequest, "Bad request", "The form could not be read: "+err.Error())
}
