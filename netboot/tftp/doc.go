// Package tftp is rackd's read-only TFTP server (RFC 1350) for network boot,
// serving a files.Source: the boot tree with per-machine configs rendered
// in memory.
//
// The read path is rackd's own. It used to be github.com/pin/tftp/v3
// (v3.1.0), which sends one block per round trip and no more (no RFC 7440),
// drops the timeout option, sends every error with code 1, and looks up the
// interface MTU with a netlink dump per request, falling back to 512-byte
// blocks when interfaces change during the dump. Profiles of a 50-client
// boot storm showed its per-block loop close to the kernel's floor for
// lock step (most of the time in sendto); what was left to gain was in
// sending more than one block per round trip, which needs a data path of
// our own. The library's netascii converter is still used, and its client
// in the tests.
//
// # Options
//
// Option names are matched whatever their case (RFC 2347); unknown options,
// and values out of their RFC's range, are left out of the OACK, and the
// client then uses the default. When the client asks for no option the
// server knows, the answer is DATA 1 with no OACK.
//
//   - blksize (RFC 2348), capped at the MTU of the interface the request
//     came in on, less the IP, UDP and TFTP headers, so that no DATA packet
//     is fragmented; Config.MaxBlockSize caps it further. The MTU comes from
//     an ioctl on that one interface, cached for 30 s (a storm costs no
//     system call for it), never from a dump of all interfaces; when it
//     cannot be had, an Ethernet MTU is assumed.
//   - tsize (RFC 2349), from files.File.Size, rendered configs included, in
//     octet mode: firmware sizes its buffer from it, and some falls back to
//     a crawl without it. (In netascii mode the size on the wire is not the
//     file's, and tsize is left out.)
//   - timeout (RFC 2349), 1-255 s, echoed and used as the retransmission
//     timeout; Config.Timeout otherwise.
//   - windowsize (RFC 7440), capped at Config.MaxWindowSize and at 1 MiB
//     of blocks (the window stays in memory until acknowledged): that many
//     blocks are sent per ACK. The client acknowledges the last block of a
//     window, or the last it got in order when one went missing; the server
//     goes on from the block after the one acknowledged, and resends the
//     window from there after a timeout. A window goes to the kernel in one
//     sendmsg with UDP segmentation offload (UDP_SEGMENT), which cuts it
//     into one datagram per block, so a window costs about what one block
//     costs in lock step; if the kernel refuses, blocks are sent one by one.
//     In lock step (no windowsize), a duplicate ACK is never answered by a
//     resend (RFC 1123 4.2.3.1, the Sorcerer's Apprentice).
//
// Block numbers roll over from 65535 to 0, as tftp-hpa, atftp and curl
// expect, so files larger than 32 MiB transfer with 512-byte blocks.
//
// Each transfer has its own socket (its TID), bound to the address the
// request was sent to (IP_PKTINFO tells which) and connected to the client:
// the client hears the server it asked, the kernel drops packets from other
// addresses and ports, and sends need no route lookup each.
//
// # Errors
//
// Names are sanitised by the Source (files.Clean, os.Root). Unknown names
// get code 1 "File not found", names that try to leave the tree code 2
// "Access violation", write requests code 2 "Access violation: read-only
// server", mode "mail" code 4; busy, shutdown, timeout and local failures
// code 0 with a message. Clients act on the code; the message, which RFC
// 1350 leaves to the server, names the file and the Source's reason, so
// that whoever watches a client (tftp-hpa prints "Error code 1: File not
// found: pxelinux.0: no bootloader image provides it ...") sees the cause
// that would otherwise be only in rackd's log. It is printable ASCII, at
// most 400 bytes: a client's buffer holds one 512-byte block. Packets to
// the server port that are no request are counted and not answered: an
// ERROR to an ERROR could start an exchange with another server.
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
// When Serve's context ends the server socket closes, queued requests are
// answered "shutting down", and transfers may finish for
// Config.ShutdownGrace; then each is aborted between two blocks (a transfer
// waiting on a silent client is woken, and waits 200 ms more for an ACK on
// its way, so that the client reads the ERROR rather than an ICMP error
// from a closed port).
//
// # Metrics
//
// In namespace rackd, subsystem tftp: transfers_total by outcome (ok,
// not_found, refused, write_refused, busy, shutdown, timeout, aborted,
// malformed, error), transfer_duration_seconds (successful transfers, from
// the request to the last ACK), bytes_total, transfers_in_flight,
// transfers_queued, queue_wait_seconds, retransmitted_requests_total, and
// config_answer_seconds: for rendered configs, the time from the request
// arriving at the server socket to the first packet of the answer (OACK or
// DATA 1) sent. That is the server's own share of a config fetch (parsing,
// rendering from the store, the transfer socket); the rest of the exchange
// is round trips that depend on the client.
package tftp
