// Command deploy measures commissioning and deployment on a real VM powered by a real BMC:
// the wall time of commissioning (rackd machines commission until READY)
// and of deployment (rackd machines deploy until DEPLOYED), and the rate at
// which the deploy environment streams the raw image from rackd's HTTP to
// the VM's disk (download, sha256, write, fsync) against a plain download
// of the same image from the same rackd into nothing, inside the same
// environment just before (the u-root environment has no curl: the enlist
// client's enlist.measure_download=1 does the GET with Go's net/http and
// io.Copy to io.Discard, timed the same way).
//
// It runs the real-VM test TestE2ECommissionDeployRelease (package e2e:
// ipmi_sim powering a QEMU VM, rackd in a network namespace of its own)
// -reps times with a -image-mb MiB image and prints each run and, last,
// one line:
//
//	RESULT commission_s=<median> deploy_s=<median> stream_mb_s=<median> curl_mb_s=<median> ratio=<stream/curl> reps=<n> image_mb=<n> accel=<tcg|kvm|auto>
//
// curl_mb_s is the plain download's rate (named after what the issue asks
// to compare with). It needs root, QEMU and ipmi_sim (make bench-deploy
// installs what is missing); the enlistment image is built first when it
// is missing (make initramfs).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	"rackd/bench/internal/e2eresult"
)

func main() {
	reps := flag.Int("reps", 1, "runs to measure (medians are reported)")
	imageMB := flag.Int("image-mb", 256, "size of the raw image deployed, MiB")
	timeout := flag.Duration("timeout", 30*time.Minute, "bound on each run, including a first build of the image")
	flag.Parse()
	if err := run(*reps, *imageMB, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "bench-deploy:", err)
		os.Exit(1)
	}
}

var keys = []string{"e2e_commission_s", "e2e_deploy_s", "e2e_stream_mb_s", "e2e_download_mb_s"}

func run(reps, imageMB int, timeout time.Duration) error {
	if reps < 1 || reps > 20 {
		return fmt.Errorf("-reps %d: want 1..20", reps)
	}
	if imageMB < 1 || imageMB > 4096 {
		return fmt.Errorf("-image-mb %d: want 1..4096", imageMB)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root (network namespaces, a tap device for the VM)")
	}
	got := map[string][]float64{}
	for i := 1; i <= reps; i++ {
		vals, err := e2eresult.Run{
			Test: "TestE2ECommissionDeployRelease", Package: "./e2e/",
			Env:     []string{"RACKD_E2E_BENCH=1", "RACKD_E2E_RAW_MB=" + strconv.Itoa(imageMB)},
			Timeout: timeout, Prefix: fmt.Sprintf("run %d: ", i), Keys: keys,
			Echo: []string{"commissioned in", "deployed in", "streamed to", "time spent", "plain download", "make initramfs took"},
		}.Do(context.Background())
		if err != nil {
			return fmt.Errorf("run %d: %w", i, err)
		}
		for _, k := range keys {
			got[k] = append(got[k], vals[k])
		}
	}
	med := func(k string) float64 {
		v := slices.Clone(got[k])
		slices.Sort(v)
		return v[len(v)/2]
	}
	stream, plain := med("e2e_stream_mb_s"), med("e2e_download_mb_s")
	fmt.Printf("RESULT commission_s=%.1f deploy_s=%.1f stream_mb_s=%.1f curl_mb_s=%.1f ratio=%.2f reps=%d image_mb=%d accel=%s\n",
		med("e2e_commission_s"), med("e2e_deploy_s"), stream, plain, stream/plain, reps, imageMB, e2eresult.Accel())
	return nil
}
