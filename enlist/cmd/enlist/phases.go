package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"rackd/enlist"
	"rackd/enlist/bmc"
	"rackd/enlist/deploy"
	"rackd/enlist/inventory"
	"rackd/internal/chunksum"
)

// The phase modes: booted by rackd with rackd.mode=commission,
// deploy or erase and rackd.machine=<id>, the program claims the phase's
// credential from rackd (once per phase, from the address of its DHCP
// lease: the boot config carries none), does the phase's work and reports
// to rackd with the credential instead of asking whoami.

// disk is a disk open for writing.
type disk interface {
	deploy.Disk
	Close() error
}

// phaseArgs are what the kernel command line says about the phase.
type phaseArgs struct {
	mode, machine string
	// token is the phase credential, claimed from rackd as the phase
	// starts (claimCredential).
	token string
	// deploy: the image's path under /boot/ and what rackd says about it
	// (format, sizes and checksums of the served file and of the
	// decompressed image); the disk rule.
	image    string
	img      deploy.Image
	diskRule string
	// chunks is the SHA-256 of the image's chunk list
	// (rackd.image_chunks=), served next to the image; empty when rackd
	// has none for it (an image imported before chunk lists existed):
	// the whole stream is hashed then.
	chunks string
	// measureDownload (enlist.measure_download=1, an image's own argument:
	// benchmarks only) first fetches the image into nothing, timed, as the
	// reference the streaming rate is compared with.
	measureDownload bool
}

// parsePhaseArgs reads the phase's arguments from the command line (and
// the -disk flag, which wins over rackd.disk=).
func parsePhaseArgs(mode, cmdline, diskFlag string) (phaseArgs, error) {
	get := func(k string) string { v, _ := inventory.ParseCmdline(cmdline, k); return v }
	p := phaseArgs{mode: mode, machine: get("rackd.machine"), diskRule: get("rackd.disk"),
		measureDownload: get("enlist.measure_download") == "1"}
	if diskFlag != "" {
		p.diskRule = diskFlag
	}
	if p.machine == "" {
		return p, fmt.Errorf("rackd.mode=%s needs rackd.machine= on the kernel command line", mode)
	}
	if mode != enlist.ModeDeploy {
		return p, nil
	}
	p.image = get("rackd.image")
	if p.image == "" || strings.Contains(p.image, "..") || strings.HasPrefix(p.image, "/") {
		return p, fmt.Errorf("rackd.image=%q: want the image's path under rackd's /boot/", p.image)
	}
	size, err := strconv.ParseInt(get("rackd.image_size"), 10, 64)
	if err != nil || size <= 0 {
		return p, fmt.Errorf("rackd.image_size=%q: want the image's size in bytes", get("rackd.image_size"))
	}
	p.img = deploy.Image{Size: size, SHA256: get("rackd.image_sha256"), RawSHA256: get("rackd.image_raw_sha256")}
	if p.img.Format, err = deploy.ParseFormat(get("rackd.image_format")); err != nil {
		return p, fmt.Errorf("rackd.image_format: %w", err)
	}
	if s := get("rackd.image_raw_size"); s != "" {
		if p.img.RawSize, err = strconv.ParseInt(s, 10, 64); err != nil || p.img.RawSize <= 0 {
			return p, fmt.Errorf("rackd.image_raw_size=%q: want the decompressed image's size in bytes", s)
		}
	}
	if err := p.img.Check(); err != nil {
		return p, fmt.Errorf("the rackd.image_* arguments: %w", err)
	}
	if p.chunks = get("rackd.image_chunks"); p.chunks != "" && !isHex64(p.chunks) {
		return p, fmt.Errorf("rackd.image_chunks=%q: want the chunk list's sha256, 64 lower-case hex digits", p.chunks)
	}
	return p, nil
}

func isHex64(s string) bool {
	return len(s) == 64 && strings.Trim(s, "0123456789abcdef") == ""
}

// fetchChunks fetches the image's chunk list, served next to the image
// under its own digest, and checks it: its digest (the command line's),
// and that it describes an image of the size announced. It reads at most
// what a list of that image in the smallest chunks takes.
func fetchChunks(ctx context.Context, base *url.URL, p phaseArgs) (*chunksum.List, error) {
	u := strings.TrimSuffix(base.String(), "/") + "/boot/" + path.Join(path.Dir(p.image), p.chunks)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s", u, resp.Status)
	}
	rawSize := p.img.RawSize
	if rawSize == 0 {
		rawSize = p.img.Size
	}
	limit := 128 + chunksum.Count(rawSize, chunksum.MinSize)*(2*sha256.Size+1)
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", u, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: more than the %d bytes a chunk list of a %d-byte image takes", u, limit, rawSize)
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != p.chunks {
		return nil, fmt.Errorf("%s: sha256 mismatch: the chunk list hashes to %x, want %s", u, sum, p.chunks)
	}
	l, err := chunksum.Parse(b)
	if err != nil {
		return nil, err
	}
	if l.ImageSize != rawSize {
		return nil, fmt.Errorf("the chunk list describes a %d-byte image, the image is %d bytes", l.ImageSize, rawSize)
	}
	return l, nil
}

// runPhase claims the phase's credential from the interface mac, does the
// work of the phase and reports it; it returns the final console line and
// what to do next. An error means the claim or the report could not be
// made: rackd's watchdog will fail the phase.
func runPhase(ctx context.Context, sys system, p phaseArgs, mac string, base *url.URL, client *enlist.Client, inv enlist.Inventory,
	say func(string, ...any)) (final string, action enlist.Action, err error) {
	switch p.mode {
	case enlist.ModeCommission, enlist.ModeDeploy, enlist.ModeErase:
	default:
		return "", "", fmt.Errorf("rackd.mode=%q: want enlist, commission, deploy or erase", p.mode)
	}
	cred, err := claimCredential(ctx, client, p, mac, say)
	if err != nil {
		return "", "", err
	}
	p.token = cred.Token
	rep := enlist.Report{Machine: p.machine}
	var path, done string
	switch p.mode {
	case enlist.ModeCommission:
		path = enlist.PathCommissioned
		rep.Inventory = &inv
		if cred.BMCSetup {
			rep.BMC = setUpBMC(sys, say)
		}
	case enlist.ModeDeploy:
		path = enlist.PathDeployed
		res, name, werr := deployImage(ctx, sys, p, base, client, inv, say)
		if werr != nil {
			rep.Error = werr.Error()
		} else {
			rep.Disk, rep.Bytes, rep.SHA256 = name, res.Bytes, res.SHA256
			rep.WriteSeconds = res.Elapsed.Seconds()
			if res.Chunks > 0 {
				// Every chunk matched the list rackd recorded for this
				// image at import: the disk holds the image it names.
				rep.SHA256 = p.img.SHA256
			}
			done = fmt.Sprintf("%d bytes to %s", res.Bytes, name)
		}
	case enlist.ModeErase:
		path = enlist.PathErased
		erased, eerr := eraseDisks(sys, p, inv, say)
		rep.Erased = erased
		if eerr != nil {
			rep.Error = eerr.Error()
		}
		done = strings.Join(erased, " ")
	}
	if len(rep.Error) > enlist.MaxReportError {
		rep.Error = rep.Error[:enlist.MaxReportError]
	}
	if rep.Error != "" {
		say("%s failed: %s; reporting to rackd", p.mode, rep.Error)
	} else {
		say("%s done; reporting to rackd", p.mode)
	}
	ans, err := client.Report(ctx, path, p.token, rep)
	if err != nil {
		if rep.Error != "" {
			return "", "", fmt.Errorf("%s: %s; and the report failed: %w", p.mode, rep.Error, err)
		}
		return "", "", fmt.Errorf("report: %w", err)
	}
	action = ans.Action
	switch {
	case rep.Error != "":
		final = enlist.MarkerPhaseFailed + p.mode + ": " + oneLine(rep.Error) + " (reported), " + action.Doing()
	case p.mode == enlist.ModeCommission:
		final = enlist.MarkerCommissioned + ans.State + "), " + action.Doing()
	case p.mode == enlist.ModeDeploy:
		final = enlist.MarkerDeployed + done + ", " + action.Doing()
	default:
		final = enlist.MarkerErased + done + ", " + action.Doing()
	}
	return final, action, nil
}

// claimCredential claims the phase's credential. rackd hands it out once
// per phase, to the address of mac's DHCP lease: a refusal is not retried,
// and says on the console what it means.
func claimCredential(ctx context.Context, client *enlist.Client, p phaseArgs, mac string, say func(string, ...any)) (enlist.Credential, error) {
	if mac == "" {
		return enlist.Credential{}, errors.New("cannot tell which interface holds this machine's address: boot with BOOTIF= on the kernel command line, or let the program run DHCP")
	}
	say("claiming the %s credential of machine %s (interface %s)", p.mode, p.machine, mac)
	cred, err := client.ClaimCredential(ctx, p.machine, mac)
	var perm *enlist.PermanentError
	switch {
	case errors.As(err, &perm) && perm.Status == http.StatusConflict:
		say("REFUSED: rackd handed this phase's credential out already; another host may hold it. " +
			"rackd's events of this machine name the address that claimed it. This environment cannot report.")
		return enlist.Credential{}, fmt.Errorf("credential refused: %s (%d %s)", perm.Msg, perm.Status, perm.Code)
	case errors.As(err, &perm):
		say("REFUSED: rackd gives the credential only to the address of %s's DHCP lease while the machine is in a phase "+
			"(an address not from rackd's DHCP, NAT, or a phase that ended); rackd's events of this machine say why.", mac)
		return enlist.Credential{}, fmt.Errorf("credential refused: %s (%d %s)", perm.Msg, perm.Status, perm.Code)
	case err != nil:
		return enlist.Credential{}, fmt.Errorf("credential: %w", err)
	}
	if cred.Phase != p.mode {
		return enlist.Credential{}, fmt.Errorf("credential refused: rackd granted a %s credential, and this environment runs %s", cred.Phase, p.mode)
	}
	say("claimed the %s credential", cred.Phase)
	return cred, nil
}

// setUpBMC runs the in-band BMC set-up rackd asked for. A failure does
// not fail the commissioning: rackd records why, and the machine's power
// stays as it was. The password is reported, never printed.
func setUpBMC(sys system, say func(string, ...any)) *enlist.BMCReport {
	rep := &enlist.BMCReport{Driver: "ipmi"}
	if sys.bmcSetup == nil {
		rep.Error = "this environment cannot reach a BMC in-band"
		say("BMC set-up: %s", rep.Error)
		return rep
	}
	say("setting up the BMC in-band (user %s)", bmc.DefaultUser)
	r, err := sys.bmcSetup()
	if err != nil {
		rep.Error = oneLine(err.Error())
		if len(rep.Error) > enlist.MaxReportError {
			rep.Error = rep.Error[:enlist.MaxReportError]
		}
		say("BMC set-up failed: %s", rep.Error)
		return rep
	}
	rep.Address, rep.Username, rep.Password = r.Address.String(), r.User, r.Password
	rep.Detail = r.String()
	if len(rep.Detail) > enlist.MaxReportError {
		rep.Detail = rep.Detail[:enlist.MaxReportError]
	}
	say("BMC set up: %s", rep.Detail)
	return rep
}

// stallTimeout ends an image download that makes no progress.
const stallTimeout = 60 * time.Second

// deployImage fetches the deployment's seed and streams the image from
// rackd to the chosen disk, the seed in a partition at its end.
func deployImage(ctx context.Context, sys system, p phaseArgs, base *url.URL, client *enlist.Client, inv enlist.Inventory,
	say func(string, ...any)) (deploy.Result, string, error) {
	rawSize := p.img.RawSize
	if rawSize == 0 {
		rawSize = p.img.Size
	}
	seed, err := client.Seed(ctx, p.token)
	switch {
	case errors.Is(err, enlist.ErrNoSeed):
		say("rackd has no seed for this deployment: deploying the image without one")
		seed = nil
	case err != nil:
		return deploy.Result{}, "", fmt.Errorf("fetch the seed: %w", err)
	default:
		say("seed: %d bytes", len(seed))
	}
	target, err := deploy.ChooseDisk(inv.Disks, p.diskRule, deploy.DiskNeeded(rawSize, len(seed)))
	if err != nil {
		return deploy.Result{}, "", err
	}
	if sys.openDisk == nil {
		return deploy.Result{}, target.Name, errors.New("no way to open disks here")
	}
	d, err := sys.openDisk(target.Name)
	if err != nil {
		return deploy.Result{}, target.Name, fmt.Errorf("open disk %s: %w", target.Name, err)
	}
	defer d.Close()
	if p.chunks != "" {
		if p.img.Chunks, err = fetchChunks(ctx, base, p); err != nil {
			return deploy.Result{}, target.Name, fmt.Errorf("fetch the image's chunk list: %w", err)
		}
		say("chunk list: %d chunks of %d bytes, verified in parallel on %d CPUs", len(p.img.Chunks.Sums), p.img.Chunks.ChunkSize, runtime.GOMAXPROCS(0))
	}
	u := strings.TrimSuffix(base.String(), "/") + "/boot/" + p.image
	if p.measureDownload {
		if err := measureDownload(ctx, u, say); err != nil {
			say("download-only measurement failed: %v", err)
		}
	}
	if p.img.Format == deploy.FormatRaw {
		say("writing %s (%d bytes, sha256 %s) to %s (%d bytes)", u, p.img.Size, p.img.SHA256, target.Name, target.SizeBytes)
	} else {
		say("writing %s (%s, %d bytes, sha256 %s; %d bytes decompressed) to %s (%d bytes)", u, p.img.Format, p.img.Size, p.img.SHA256,
			rawSize, target.Name, target.SizeBytes)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return deploy.Result{}, target.Name, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return deploy.Result{}, target.Name, fmt.Errorf("fetch the image: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return deploy.Result{}, target.Name, fmt.Errorf("fetch the image: %s answered %s", u, resp.Status)
	}
	if resp.ContentLength >= 0 && resp.ContentLength != p.img.Size {
		return deploy.Result{}, target.Name, fmt.Errorf("fetch the image: %s is %d bytes, rackd.image_size says %d", u, resp.ContentLength, p.img.Size)
	}
	body := newStallReader(resp.Body, stallTimeout, func() {
		cancel(fmt.Errorf("the image download made no progress for %s", stallTimeout))
	})
	defer body.stop()
	start, lastSaid := time.Now(), time.Now()
	res, err := deploy.Write(ctx, body, d, p.img, deploy.Options{Seed: seed, DiskSize: target.SizeBytes, Progress: func(n int64) {
		body.Progress()
		if time.Since(lastSaid) >= 5*time.Second {
			lastSaid = time.Now()
			say("written %d of %d bytes", n, rawSize)
		}
	}})
	if err != nil {
		if c := context.Cause(ctx); c != nil && ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", err, c)
		}
		return res, target.Name, err
	}
	res.Elapsed = time.Since(start)
	secs := res.Elapsed.Seconds()
	verified := "sha256 verified"
	if res.Chunks > 0 {
		verified = fmt.Sprintf("sha256 of %d chunks verified", res.Chunks)
	}
	say("wrote %d bytes to %s in %.2fs (%.1f MB/s), %s, synced", res.Bytes, target.Name, secs, float64(res.Bytes)/1e6/max(secs, 1e-3), verified)
	if s := res.Seed; s != nil {
		say("seed written to %s partition %d (%s), bytes %d to %d of the disk", deploy.SeedPartitionName, s.Partition, s.Table, s.Start, s.Start+s.Size)
	}
	if p.img.Format != deploy.FormatRaw {
		say("downloaded %d bytes of %s (%.1f MB/s)", res.Downloaded, p.img.Format, float64(res.Downloaded)/1e6/max(secs, 1e-3))
	}
	say("time spent (overlapping): reading %.2fs, hashing %.2fs, decompressing %.2fs, writing %.2fs",
		res.Read.Seconds(), res.Hash.Seconds(), res.Decompress.Seconds(), res.Write.Seconds())
	return res, target.Name, nil
}

// stallReader calls its stall function when a download makes no progress
// for its timeout: no read returned data and no byte reached the disk
// (Progress). Bytes waiting for a slow disk hold the download back: that is
// not a stall. Once the body is read to its end, the download is over and
// the timer stops: the disk's final flush, however long a loaded host makes
// it, is not the download's.
type stallReader struct {
	r io.Reader
	d time.Duration
	t *time.Timer

	mu   sync.Mutex // Read and Progress come from different goroutines
	done bool
}

func newStallReader(r io.Reader, d time.Duration, stalled func()) *stallReader {
	return &stallReader{r: r, d: d, t: time.AfterFunc(d, stalled)}
}

func (s *stallReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err == io.EOF {
		s.stop()
	} else if n > 0 {
		s.Progress()
	}
	return n, err
}

// Progress records progress: bytes read, or written to the disk.
func (s *stallReader) Progress() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.done {
		s.t.Reset(s.d)
	}
}

// stop ends the watch for good.
func (s *stallReader) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done = true
	s.t.Stop()
}

// eraseDisks wipes the first and last MiB of the chosen disk ("auto":
// every disk but CD/DVD drives).
func eraseDisks(sys system, p phaseArgs, inv enlist.Inventory, say func(string, ...any)) ([]string, error) {
	var targets []enlist.Disk
	if p.diskRule == "" || p.diskRule == "auto" {
		for _, d := range inv.Disks {
			if !strings.HasPrefix(d.Name, "sr") {
				targets = append(targets, d)
			}
		}
	} else {
		d, err := deploy.ChooseDisk(inv.Disks, p.diskRule, 0)
		if err != nil {
			return nil, err
		}
		targets = append(targets, d)
	}
	if sys.openDisk == nil {
		return nil, errors.New("no way to open disks here")
	}
	var erased []string
	var errs []error
	for _, t := range targets {
		d, err := sys.openDisk(t.Name)
		if err == nil {
			err = deploy.Erase(d, t.SizeBytes)
			if cerr := d.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", t.Name, err))
			continue
		}
		say("erased the first and last MiB of %s", t.Name)
		erased = append(erased, t.Name)
	}
	return erased, errors.Join(errs...)
}

// measureDownload fetches u into nothing and says how fast: the reference
// a benchmark compares the deployment's streaming rate with (the same
// environment, the same server, no hashing, no disk).
func measureDownload(ctx context.Context, u string, say func(string, ...any)) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s", u, resp.Status)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	say("download only: %d bytes in %.2fs (%.1f MB/s)", n, secs, float64(n)/1e6/max(secs, 1e-3))
	return nil
}
