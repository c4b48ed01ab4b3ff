// Package tftp is rackd's read-only TFTP server (RFC 1350) for network boot,
// built on github.com/pin/tftp/v3 and serving a files.Source: the boot tree
// with per-machine configs rendered in memory.
//
// # Options
//
// The library negotiates, through the option extension of RFC 2347:
//
//   - blksize (RFC 2348), capped at the MTU of the interface the request
//     came in on, less the IP and UDP headers, so that no DATA packet is
//     fragmented; Config.MaxBlockSize caps it further.
//   - tsize (RFC 2349). The server always sets it from files.File.Size,
//     rendered configs included, whenever the client asks (an OACK may
//     carry only options the client sent, RFC 2347): firmware sizes its
//     buffer from it, and some falls back to a crawl without it. The
//     library's own way, seeking the reader, would miss anything that is
//     not an io.Seeker. (A zero-length file is the one exception: the
//     library drops tsize=0 from its OACK.)
//
// The timeout option of RFC 2349 is not acknowledged: pin/tftp v3.1.0's
// sender removes every option but blksize and tsize from its OACK, which
// RFC 2347 permits (a server omits options it does not support, and the
// client then uses its defaults). The server retransmits after
// Config.Timeout.
//
// RFC 7440 windowsize is not offered either: the library cannot send more
// than one block per ACK the standard way (its "anticipate" sender is a
// non-standard scheme that no firmware speaks, and is left off), so every
// transfer runs in lock step, one block per round trip. Throughput per
// client is then bounded by blksize/RTT; on a rack LAN with blksize 1468
// that is the same bound tftpd-hpa and dnsmasq have, as neither negotiates
// windowsize.
//
// The library sizes blocks from the MTU of the receiving interface, looked
// up per request with a netlink dump; when that lookup fails (interfaces
// changing at that moment) the transfer falls back to 512-byte blocks. It
// is correct, only slower.
//
// Option names are matched as sent, in lower case, by the library, where
// RFC 2347 says they are case-insensitive: a client sending "BLKSIZE" gets
// no OACK and 512-byte blocks, which is slow but works. The clients tested
// here (tftp-hpa, atftp, curl) send lower case.
//
// Block numbers roll over from 65535 to 0, as tftp-hpa, atftp and curl
// expect, so files larger than 32 MiB transfer with 512-byte blocks.
//
// # Errors
//
// Names are sanitised by the Source (files.Clean, os.Root): unknown names
// get "File not found", names that try to leave the tree "Access violation".
// The library sends every error with code 1 (File not found) whatever the
// cause, so the distinction is in the message text only, which clients print.
// Write requests are refused.
//
// # Concurrency
//
// At most Config.MaxTransfers transfers run at once; more wait in a FIFO
// queue (up to Config.MaxQueued, for at most Config.QueueTimeout) rather
// than being refused, because a refused PXE ROM gives up and the machine
// does not boot, while a delayed one just waits. A request is opened before
// it queues, so "File not found", which pxelinux gets a dozen times per
// boot while it probes config names, is answered at once. Small files
// (at most Config.SmallFileSize: configs, not kernels) never queue: they
// cost a few round trips, and waiting behind 64 kernel downloads would add
// seconds to every boot. A client that repeats its request while it is
// queued (it heard nothing, so it retransmits) is recognised by its address
// and port, and the repeat is dropped silently instead of starting a second
// transfer to the same client.
//
// # Metrics
//
// In namespace rackd, subsystem tftp: transfers_total by outcome (ok,
// not_found, refused, write_refused, busy, shutdown, timeout, aborted,
// malformed, error) and transfer_duration_seconds come from the library's
// Hook; bytes_total, transfers_in_flight, transfers_queued,
// queue_wait_seconds and retransmitted_requests_total from the read
// handler, since the Hook sees only the end of a transfer and its stats
// carry no byte count.
package tftp
