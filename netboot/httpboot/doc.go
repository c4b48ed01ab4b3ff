// Package httpboot serves the boot file tree over HTTP under /boot/, for
// UEFI HTTP boot (UEFI 2.5+ section 24.7) and iPXE, from the same
// files.Source as TFTP: the tree on disk with per-machine configs rendered
// in memory.
//
// Files go through http.ServeContent, which gives Range requests and 206
// (RFC 9110 section 14), conditional requests on the ETag (If-None-Match,
// 304, and If-Range) and Last-Modified, and an exact Content-Length, which
// firmware needs to size its buffer. The files of a files.Tree embed their
// *os.File, so ServeContent's copy reaches the kernel's sendfile(2) path:
// image bytes go from the page cache to the socket without a copy through
// user space (the response writer this package wraps around the
// http.ResponseWriter, to count bytes, keeps its io.ReaderFrom for that
// reason).
//
// Rendered configs are sent as text/plain with "Cache-Control: no-cache",
// so a client revalidates (and gets a 304 only while the config is
// unchanged): a machine whose state changed gets its new config on the
// next request.
//
// # Names
//
// The name is the request path after /boot/, already percent-decoded,
// checked by files.Clean and opened through os.Root (see package files):
// unknown names are 404, names that try to leave the tree ("..", "%2e%2e",
// a second leading "/", a symlink pointing out) are 403, malformed names
// (NUL, control characters, backslash, longer than 255 bytes) are 400.
// Only GET and HEAD are allowed (405 otherwise).
//
// The query form: a request with a "mac" query parameter, such as
// /boot/ipxe?mac=52:54:00:12:34:56 (what the iPXE script URL handed out by
// DHCP looks like), is opened under the name "ipxe?mac=52:54:00:12:34:56":
// the path's name, "?mac=", and the parameter's decoded value verbatim. The
// renderer must recognise that name and parse (and validate) the MAC
// itself; if it declines, the answer is 404, never a file of the tree.
// Other query parameters are ignored; more than one "mac" is 400.
//
// # Metrics
//
// rackd_httpboot_requests_total by status code and rackd_httpboot_bytes_total
// (body bytes sent).
package httpboot
