package deploy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// The chunked path. When rackd hands over the image's chunk list (the
// SHA-256 of each 4 MiB chunk of the raw image, recorded at import), the
// raw stream is verified chunk by chunk, each chunk's digest computed by
// one of a pool of workers, one per CPU, while the next chunks are read
// (downloaded, decompressed) and the verified ones written: the rate is
// bound by the slowest of reading, writing, and hashing spread over every
// CPU, rather than by one sequential SHA-256. Every byte written is proven
// by its chunk's digest, so neither the whole raw image's digest nor the
// served file's is computed (a compressed file that decompresses to the
// right bytes is the right image). The head is held back and written last
// exactly as on the sequential path.

// maxHashWorkers bounds the pool: each worker keeps a chunk in memory.
const maxHashWorkers = 16

// hashWorkers is how many chunks are hashed at once: one per CPU the
// program may run on (GOMAXPROCS: the machine's CPUs, or fewer when a
// CPU limit says so).
func hashWorkers() int { return max(1, min(runtime.GOMAXPROCS(0), maxHashWorkers)) }

// streamChunks reads the raw image (size bytes, in img.Chunks's chunks) from
// src and writes it to d, all but the first HeadSize bytes, which it
// returns (prepare sees them before anything else is written). Each chunk
// is read whole into one of a few buffers, then handed to a hash worker
// and, at the same time, to the disk writer, which writes in order; the
// buffer is reused once both are done. It stops at the first failure: a
// mismatching chunk (a *ChecksumError naming it), a write error, the
// context, or the reader's error, which readFail words (with the bytes
// read before it); a worker's or the writer's failure wins over the
// reader's, which it often causes. what names the stream in a
// ChecksumError. readTime gets the time spent in src.Read.
func streamChunks(ctx context.Context, src io.Reader, d Disk, size int64, img Image, what string, opt Options,
	prepare func([]byte) error, readFail func(error, int64) error, readTime *time.Duration, res *Result) ([]byte, int64, error) {
	type job struct {
		i    int
		b    []byte
		off  int64
		left atomic.Int32
	}
	list := img.Chunks
	workers := hashWorkers()
	inflight := workers + 2 // one being read, one being written
	free := make(chan []byte, inflight)
	for range inflight {
		free <- alignedBuf(int(list.ChunkSize))
	}
	release := func(j *job) {
		if j.left.Add(-1) == 0 {
			free <- j.b[:cap(j.b)]
		}
	}
	var (
		wg       sync.WaitGroup
		failed   atomic.Pointer[error]
		hashNS   atomic.Int64
		written  atomic.Int64
		writeDur time.Duration // the writer's only
	)
	fail := func(err error) { failed.CompareAndSwap(nil, &err) }
	hashQ, writeQ := make(chan *job, inflight), make(chan *job, inflight)
	for range workers {
		wg.Go(func() {
			for j := range hashQ {
				if failed.Load() == nil {
					t := time.Now()
					got := sha256.Sum256(j.b)
					hashNS.Add(int64(time.Since(t)))
					if want := list.Sums[j.i]; got != want {
						fail(&ChecksumError{What: what, Chunk: j.i, Offset: j.off, Len: int64(len(j.b)), Image: img.SHA256,
							Got: hex.EncodeToString(got[:]), Want: hex.EncodeToString(want[:])})
					}
				}
				release(j)
			}
		})
	}
	head := alignedBuf(int(min(HeadSize, size)))
	wg.Go(func() {
		for j := range writeQ {
			b, off := j.b, j.off
			if j.i == 0 {
				b, off = b[len(head):], off+int64(len(head))
			}
			if failed.Load() == nil && len(b) > 0 {
				t := time.Now()
				_, err := d.WriteAt(b, off)
				writeDur += time.Since(t)
				if err != nil {
					fail(&writeError{off: off, err: err})
				} else if n := written.Add(int64(len(b))); opt.Progress != nil {
					opt.Progress(n)
				}
			}
			release(j)
		}
	})
	written.Store(int64(len(head)))
	var (
		off  int64
		rerr error
	)
read:
	for i := 0; off < size; i++ {
		if failed.Load() != nil {
			break
		}
		var b []byte
		select {
		case b = <-free:
		case <-ctx.Done():
			rerr = ctx.Err()
			break read
		}
		if err := ctx.Err(); err != nil {
			rerr = err
			break
		}
		_, want := list.Chunk(i)
		t := time.Now()
		n, err := io.ReadFull(src, b[:want])
		*readTime += time.Since(t)
		if err != nil {
			// A partial chunk cannot be verified: it is not written.
			free <- b
			rerr = readFail(err, off+int64(n))
			break
		}
		if i == 0 {
			copy(head, b)
			if err := prepare(head); err != nil {
				free <- b
				rerr = err
				break
			}
		}
		j := &job{i: i, b: b[:n], off: off}
		j.left.Store(2)
		hashQ <- j
		writeQ <- j
		off += int64(n)
	}
	close(hashQ)
	close(writeQ)
	wg.Wait()
	res.Hash += time.Duration(hashNS.Load())
	res.Write += writeDur
	res.Bytes = written.Load()
	if off == 0 {
		res.Bytes = 0
	}
	if e := failed.Load(); e != nil {
		return nil, off, *e
	}
	if rerr != nil {
		return nil, off, rerr
	}
	return head, off, nil
}

// writeRawChunked writes a raw image verified by its chunk list.
func writeRawChunked(ctx context.Context, r io.Reader, d Disk, img Image, opt Options, prepare func([]byte) error, res *Result) ([]byte, error) {
	size := img.Size
	head, n, err := streamChunks(ctx, r, d, size, img, "image", opt, prepare, func(err error, n int64) error {
		return readErr("read the image", err, n, size)
	}, &res.Read, res)
	res.Downloaded = n
	if err != nil {
		return nil, err
	}
	var one [1]byte
	if n, _ := r.Read(one[:]); n > 0 {
		return nil, fmt.Errorf("the image is longer than the %d bytes announced", size)
	}
	return head, nil
}
