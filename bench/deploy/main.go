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
	"os/exec"
	"path/filepath"
	"rackd/bench/internal/e2eresult"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
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
	accel := os.Getenv("RACKD_E2E_ACCEL")
	if accel == "" {
		accel = "tcg"
	}
	dir, err := os.MkdirTemp("", "bench-deploy-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	got := map[string][]float64{}
	for i := 1; i <= reps; i++ {
		results := filepath.Join(dir, fmt.Sprintf("results-%d", i))
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		cmd := exec.CommandContext(ctx, goTool, "test", "-count=1", "-v", "-run", "^TestE2ECommissionDeployRelease$", "./e2e/")
		cmd.Env = append(os.Environ(), "RACKD_E2E_RESULTS="+results, "RACKD_E2E_BENCH=1",
			"RACKD_E2E_RAW_MB="+strconv.Itoa(imageMB))
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			return fmt.Errorf("run %d: go test: %v\n%s", i, err, out)
		}
		if strings.Contains(string(out), "--- SKIP") {
			return fmt.Errorf("run %d: the test skipped:\n%s", i, out)
		}
		for line := range strings.SplitSeq(string(out), "\n") {
			for _, s := range []string{"commissioned in", "deployed in", "streamed to", "time spent", "plain download", "make initramfs took"} {
				if strings.Contains(line, s) {
					fmt.Printf("run %d: %s\n", i, strings.TrimSpace(line))
				}
			}
		}
		vals, err := e2eresult.Read(results)
		if err != nil {
			return fmt.Errorf("run %d: %w\n%s", i, err, out)
		}
		for _, k := range keys {
			v, ok := vals[k]
			if !ok {
				return fmt.Errorf("run %d: the test recorded no %s\n%s", i, k, out)
			}
			got[k] = append(got[k], v)
		}
	}
	med := func(k string) float64 {
		v := slices.Clone(got[k])
		slices.Sort(v)
		return v[len(v)/2]
	}
	stream, plain := med("e2e_stream_mb_s"), med("e2e_download_mb_s")
	fmt.Printf("RESULT commission_s=%.1f deploy_s=%.1f stream_mb_s=%.1f curl_mb_s=%.1f ratio=%.2f reps=%d image_mb=%d accel=%s\n",
		med("e2e_commission_s"), med("e2e_deploy_s"), stream, plain, stream/plain, reps, imageMB, accel)
	return nil
}
