package httpboot

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"rackd/netboot/files"
)

// Prefix is the path the handler serves under; mount it there
// (mux.Handle(httpboot.Prefix, h)).
const Prefix = "/boot/"

// Handler is the HTTP boot handler. Create it with New.
type Handler struct {
	src files.Source
	log *slog.Logger
	m   *metrics
}

// New returns a handler serving src under Prefix. A nil log discards; a nil
// reg registers no metrics.
func New(src files.Source, log *slog.Logger, reg prometheus.Registerer) *Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Handler{src: src, log: log, m: newMetrics(reg)}
}

// errBadQuery is a query string that cannot name one file.
var errBadQuery = errors.New("httpboot: bad query")

// Name returns the files.Source name a request asks for: the decoded path
// after "/boot" (so with a leading slash), plus "?mac=" and the value when the query has a mac
// parameter (see the package doc). It does not sanitise; the Source does.
// ok is false when the path is not under Prefix; err is set when the query
// is malformed or has more than one mac.
func Name(u *url.URL) (name string, ok bool, err error) {
	if !strings.HasPrefix(u.Path, Prefix) {
		return "", false, nil
	}
	// The name keeps the slash after "/boot", for files.Clean to strip
	// as it strips TFTP's leading one: "/boot//etc/passwd" is then the
	// absolute name "//etc/passwd", refused, not "etc/passwd".
	p := strings.TrimPrefix(u.Path, Prefix[:len(Prefix)-1])
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return "", true, errBadQuery
	}
	switch macs := q["mac"]; len(macs) {
	case 0:
		return p, true, nil
	case 1:
		return p + "?mac=" + macs[0], true, nil
	}
	return "", true, errBadQuery
}

// ServeHTTP serves one request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := &recorder{ResponseWriter: w}
	defer func() {
		h.m.requests.WithLabelValues(codeLabel(rec.status())).Inc()
		h.m.bytes.Add(float64(rec.n))
	}()
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		rec.Header().Set("Allow", "GET, HEAD")
		http.Error(rec, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	name, ok, err := Name(r.URL)
	switch {
	case !ok:
		http.NotFound(rec, r)
		return
	case err != nil:
		http.Error(rec, "bad query", http.StatusBadRequest)
		return
	}
	f, err := h.src.Open(r.Context(), name)
	if err != nil {
		h.openError(rec, r, name, err)
		return
	}
	defer f.Close()

	hdr := rec.Header()
	hdr.Set("ETag", f.ETag())
	base := path.Base(name)
	if _, rendered := f.(*files.MemFile); rendered {
		hdr.Set("Content-Type", "text/plain; charset=utf-8")
		// no-cache is "revalidate every time", not "do not store":
		// the ETag still saves the body when nothing changed.
		hdr.Set("Cache-Control", "no-cache")
		base = "" // no type guessing from a name like "ipxe?mac=..."
	}
	// ServeContent does Range, the conditionals and Content-Length, and
	// copies f with io.CopyN, which ends in sendfile(2) for tree files.
	http.ServeContent(rec, r, base, f.ModTime(), f)
	h.log.Debug("httpboot: served", "client", r.RemoteAddr, "method", r.Method, "name", name,
		"status", rec.status(), "bytes", rec.n)
}

// openError answers a failed Open.
func (h *Handler) openError(w http.ResponseWriter, r *http.Request, name string, err error) {
	switch {
	case errors.Is(err, files.ErrNotFound):
		http.NotFound(w, r)
	case errors.Is(err, files.ErrInvalid):
		h.log.Info("httpboot: invalid name", "client", r.RemoteAddr, "name", name, "err", err)
		http.Error(w, "invalid name", http.StatusBadRequest)
	case errors.Is(err, files.ErrRefused):
		// Logged at Info: traversal attempts are worth seeing.
		h.log.Info("httpboot: name refused", "client", r.RemoteAddr, "name", name, "err", err)
		http.Error(w, "forbidden", http.StatusForbidden)
	case r.Context().Err() != nil:
		// The client left; nobody reads the answer.
		w.WriteHeader(http.StatusServiceUnavailable)
	default:
		h.log.Warn("httpboot: open", "client", r.RemoteAddr, "name", name, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
	}
}

// recorder notes the status and counts body bytes. It keeps the wrapped
// writer's io.ReaderFrom: without it io.CopyN would copy through a user
// space buffer instead of letting net/http use sendfile(2).
type recorder struct {
	http.ResponseWriter
	code int
	n    int64
}

func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(p)
	r.n += int64(n)
	return n, err
}

// ReadFrom hands src to the wrapped writer's ReadFrom (net/http's, which
// uses sendfile for files), or copies when it has none.
func (r *recorder) ReadFrom(src io.Reader) (int64, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	var n int64
	var err error
	if rf, ok := r.ResponseWriter.(io.ReaderFrom); ok {
		n, err = rf.ReadFrom(src)
	} else {
		n, err = io.Copy(writerOnly{r.ResponseWriter}, src)
	}
	r.n += n
	return n, err
}

// Unwrap lets http.ResponseController reach the wrapped writer.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *recorder) status() int {
	if r.code == 0 {
		return http.StatusOK
	}
	return r.code
}

// writerOnly hides every method but Write, so io.Copy cannot loop back
// into recorder.ReadFrom.
type writerOnly struct{ io.Writer }

// codeLabel bounds the code label to the codes this handler answers, so a
// wrapped writer's surprise cannot add series.
func codeLabel(code int) string {
	for _, c := range codes {
		if c == code {
			return strconv.Itoa(code)
		}
	}
	return "other"
}
