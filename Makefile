# rackd — the two commands are `make run` and `make test`; see README.md.

GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X rackd/agent.Version=$(VERSION) -X rackd/agent/cli.Version=$(VERSION)
STATE    ?= ./var
LISTEN   ?= 127.0.0.1:5240
export CGO_ENABLED ?= 0
export PATH := $(PATH):/usr/local/go/bin

.PHONY: all build run test bootloaders test-deps unit vet fmt-check bench-alloc bench-deps bench-dhcp clean \
	initramfs enlist-image import-initramfs appliance e2e bench-boot bench-deploy \
	image-debian debian-image bench-deploy-os e2e-deploy-os appliance-image appliance-image-check e2e-appliance \
	lab lab-down lab-tool

all: build

## build: the static rackd binary in bin/
build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/rackd ./agent/cmd/rackd

## run: rackd on its embedded defaults, state in ./var, API on 127.0.0.1:5240;
##   make run CONFIG=rackd.toml runs it on that configuration file instead,
##   whose state_dir and listen hold unless STATE or LISTEN are given too
ifeq ($(CONFIG),)
RUN_FLAGS := --state-dir $(STATE) --listen $(LISTEN)
else
RUN_FLAGS := --config $(CONFIG)
ifneq ($(filter command line environment,$(origin STATE)),)
RUN_FLAGS += --state-dir $(STATE)
endif
ifneq ($(filter command line environment,$(origin LISTEN)),)
RUN_FLAGS += --listen $(LISTEN)
endif
endif

run: build
ifeq ($(CONFIG),)
	@mkdir -p $(STATE)
	@echo "rackd: state in $(STATE), API on http://$(LISTEN), admin token in $(STATE)/admin.token"
	@echo "rackd: try   RACKD_STATE_DIR=$(STATE) ./bin/rackd machines list"
else
	@echo "rackd: configuration $(CONFIG); its log says where the state, the API and the admin token are"
endif
	./bin/rackd serve $(RUN_FLAGS)

## lab: a virtual rack on this machine (root; docs/GETTING-STARTED.md): a
##   network namespace with a bridge, rackd serving it, the enlistment image
##   and the bootloaders imported, and LAB_MACHINES (2) QEMU machines, odd
##   ones behind an ipmi_sim BMC, even ones behind a Redfish BMC (state in
##   var/lab; prints the web UI's address, the token and what to run next)
## lab-down: removes what make lab made (by name and PID), lab up or not
LAB_MACHINES ?= 2
lab: build lab-tool
	@./bin/rackd-lab up --machines $(LAB_MACHINES)

lab-down: lab-tool
	@./bin/rackd-lab down

lab-tool:
	@$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/rackd-lab ./lab/cmd/rackd-lab

## test: install what the tests need (idempotent), build the enlistment
##   image the e2e tests boot if it is missing, then run everything
test: test-deps fmt-check unit

test-deps:
	@bash scripts/test-deps.sh

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

# -race needs cgo; the shipped binary does not. go vet, the test images'
# builds and the go test runs overlap (scripts/test-unit.sh says how).
unit:
	@GO=$(GO) RACKD_MAKE_ENLIST_IMAGE='$(MAKE) --no-print-directory enlist-image' \
		RACKD_MAKE_DEBIAN_IMAGE='$(MAKE) --no-print-directory debian-image' bash scripts/test-unit.sh

## bootloaders: pxelinux, shim+grub (amd64, arm64), iPXE and GRUB's modules
##   (http for the signed GRUB) from Debian's packages as bootloader images in
##   build/bootloaders (.debs cached in build/bootloaders-cache), imported
##   through the API of the running rackd at $(LISTEN) with the admin token of
##   $(STATE) (make run's defaults; else e.g. STATE=/var/lib/rackd
##   LISTEN=10.0.0.1:5240)
bootloaders: build
	@bash scripts/bootloaders.sh --image --cache build/bootloaders-cache build/bootloaders
	@for arch in amd64 arm64 grub-amd64; do \
		RACKD_STATE_DIR=$(STATE) RACKD_URL=http://$(LISTEN) ./bin/rackd images import $(abspath build/bootloaders)/$$arch || { \
			echo "bootloaders: import into the rackd at $(LISTEN) (state $(STATE)) failed; is it running (make run), or is it elsewhere (make bootloaders STATE=DIR LISTEN=HOST:PORT)? The .debs are cached: running again is quick" >&2; exit 1; }; \
	done

## initramfs: the enlistment environment (Debian's kernel, a u-root initramfs
##   with the enlist client as its uinit) as an importable image in
##   build/initramfs/image; the kernel package is downloaded, not installed
initramfs:
	@bash scripts/initramfs.sh

# enlist-image: build/initramfs/image unless it is there and was built from
# this checkout's sources, for the e2e tests and benchmarks (root only, as they
# are; RACKD_E2E_IMAGE names another). Built by the tests themselves, its
# minutes (many on a loaded machine) would count against their timeout.
enlist-image:
	@if [ -z "$${RACKD_E2E_IMAGE:-}" ] && [ "$$(id -u)" -eq 0 ]; then \
		bash scripts/initramfs.sh --if-stale; fi

## image-debian: a bootable Debian 12 amd64 disk image from Debian's packages
##   (GRUB for BIOS and UEFI, cloud-init, OpenSSH's server) as deploy image
##   directories build/image-debian (zstd) and build/image-debian-raw, plus
##   a variant with cloud-init disabled (root, mmdebstrap; cached in
##   /var/cache/rackd-test/image-debian: a second run takes seconds)
image-debian: test-deps
	@bash scripts/image-debian.sh

# debian-image: the Debian image for the e2e tests (root only, as they are;
# RACKD_E2E_DEBIAN names another build). Made here rather than by the tests,
# so that its minutes do not count against their timeout; cached, so seconds
# when the script did not change.
debian-image:
	@if [ -z "$${RACKD_E2E_DEBIAN:-}" ] && [ "$$(id -u)" -eq 0 ]; then bash scripts/image-debian.sh; fi

## import-initramfs: import it through the API of the running rackd at
##   $(LISTEN) with the admin token of $(STATE) (make run's defaults; else e.g.
##   STATE=/var/lib/rackd LISTEN=10.0.0.1:5240); builds it first when missing
import-initramfs: build
	@[ -f build/initramfs/image/rackd-image.json ] || bash scripts/initramfs.sh
	RACKD_STATE_DIR=$(STATE) RACKD_URL=http://$(LISTEN) ./bin/rackd images import $(abspath build/initramfs/image)

## appliance: dist/appliance/ with the static rackd, the enlistment image,
##   the bootloaders, a default config, a systemd unit and a README
appliance: build
	@bash scripts/appliance.sh

## appliance-image: the flashable appliance (GPT: BIOS and UEFI GRUB, slots A
##   and B, a data partition) as dist/rackd-appliance-$(VERSION)-amd64.img
##   (and .img.zst), and its signed update bundle .bundle, from Debian's
##   packages and this checkout; signed with build/appliance-key/ (made when
##   missing) unless APPLIANCE_KEY names a release key (docs/APPLIANCE.md)
appliance-image: test-deps
	@VERSION=$(VERSION) bash scripts/appliance-image.sh

## appliance-image-check: builds the appliance twice from this commit and
##   fails unless the .img and the .bundle are the same bytes both times
appliance-image-check: test-deps
	@set -e; rm -rf build/appliance-check; \
	for i in 1 2; do APPLIANCE_REBUILD=1 VERSION=$(VERSION) DIST=build/appliance-check/$$i bash scripts/appliance-image.sh; done; \
	cd build/appliance-check && for f in $$(cd 1 && ls *.img *.bundle); do \
		a=$$(sha256sum <1/$$f); b=$$(sha256sum <2/$$f); \
		if [ "$$a" != "$$b" ]; then echo "appliance-image-check: $$f differs between two builds of the same commit" >&2; exit 1; fi; \
		echo "appliance-image-check: $$f reproducible: $${a%% *}"; done

## e2e: only the real-VM end-to-end tests (root, QEMU; make test runs them too,
##   all but TestE2ERedfishCommissionDeploy and TestE2EBMCSetup: RACKD_E2E_ALL=1)
e2e: test-deps enlist-image
	RACKD_E2E_ALL=1 CGO_ENABLED=1 $(GO) test -count=1 -v -timeout 30m ./e2e/
	@$(MAKE) --no-print-directory e2e-appliance

## e2e-appliance: the appliance image's real-VM tests (root, QEMU, OVMF, dnsmasq):
##   boots under UEFI and BIOS, a PXE client enlisting from it, updates,
##   refused bundles, a rollback and a power loss (e2e/appliance; builds its
##   three images into build/e2e-appliance first, minutes when the initramfs changed)
e2e-appliance: test-deps enlist-image
	RACKD_E2E_APPLIANCE=1 CGO_ENABLED=1 $(GO) test -count=1 -v -timeout 75m ./e2e/appliance/

## e2e-deploy-os: the Debian deploy end to end on a real VM (root, QEMU, ipmi_sim; 10-25
##   minutes under TCG; make test runs it beside the other tests): the image booted under
##   SeaBIOS and OVMF, then commission, deploy with identity, SSH, DHCP off and reboot,
##   release with erase, redeploy, an OS that never reports
e2e-deploy-os: test-deps enlist-image debian-image
	RACKD_E2E_DEPLOY_OS=1 CGO_ENABLED=1 $(GO) test -count=1 -v -timeout 60m -run 'TestE2EDebianLocalBoot|TestE2EDeployOS$$' ./e2e/

## bench-boot: wall time from a VM's start to a NEW machine (root, QEMU, TCG)
##   flags through BENCH_BOOT_FLAGS, e.g. make bench-boot BENCH_BOOT_FLAGS='-reps 3'
bench-boot: test-deps enlist-image
	$(GO) run ./bench/boot $(BENCH_BOOT_FLAGS)

## bench-deploy: commission and deploy wall times on a VM powered by ipmi_sim, and the image's
##   streaming rate to the VM's disk vs a plain download in the same environment (root, QEMU)
##   flags through BENCH_DEPLOY_FLAGS, e.g. make bench-deploy BENCH_DEPLOY_FLAGS='-reps 3 -image-mb 512'
bench-deploy: test-deps enlist-image
	$(GO) run ./bench/deploy $(BENCH_DEPLOY_FLAGS)

## bench-deploy-os: deploy request to the first SSH command of the Debian image vs the
##   same OS powered on from the same VM's disk, and the image's stream rate raw, zstd and
##   xz (root, QEMU, ipmi_sim; builds the images when missing)
bench-deploy-os: test-deps enlist-image
	$(GO) run ./bench/deployos $(BENCH_DEPLOY_OS_FLAGS)

## bench-appliance: the appliance image's power-on to a healthy API vs the same rackd
##   installed with dist/appliance's install.sh into the Debian image (same QEMU
##   configuration, same run), the first boot to a PXE client NEW, update and rollback
##   times, the image's size (root, QEMU, OVMF, dnsmasq; builds what is missing)
.PHONY: bench-appliance
bench-appliance: test-deps enlist-image appliance debian-image
	$(GO) run ./bench/appliance $(BENCH_APPLIANCE_FLAGS)

## bench-alloc: allocation throughput vs raw fsync'd bbolt transactions
bench-alloc:
	$(GO) run ./bench/alloc

## bench-dhcp: DORA/s and CPU per DORA of rackd vs Kea and dnsmasq (root; network namespaces)
##   flags through BENCH_DHCP_FLAGS, e.g. make bench-dhcp BENCH_DHCP_FLAGS='-reps 5'
bench-dhcp: bench-deps
	$(GO) run ./bench/dhcp $(BENCH_DHCP_FLAGS)

## bench-etcd: DORA/s of one agent on a 3-member etcd vs on its database file,
##   allocations/s through the API, and a DHCP failover between three agents
##   (time, duplicates, leases lost) (root; network namespaces; etcd-server and
##   perfdhcp installed when missing); flags through BENCH_ETCD_FLAGS
.PHONY: bench-etcd
bench-etcd: bench-deps build
	@bash bench/etcd/deps.sh
	$(GO) run ./bench/etcd -rackd bin/rackd $(BENCH_ETCD_FLAGS)

## bench-metadata: whoami requests/s and p99 of bin/rackd with 10k known machines, under wrk (loopback)
##   flags through BENCH_METADATA_FLAGS, e.g. make bench-metadata BENCH_METADATA_FLAGS='-reps 5'
.PHONY: bench-metadata
bench-metadata: build
	@bash bench/metadata/deps.sh
	$(GO) run ./bench/metadata -rackd bin/rackd $(BENCH_METADATA_FLAGS)

## bench-ui: the web UI with 10k machines: the machine list's first page vs GET /api/v1/machines,
##   a state change to 100 live streams, rackd's RSS (loopback)
##   flags through BENCH_UI_FLAGS, e.g. make bench-ui BENCH_UI_FLAGS='-changes 500'
.PHONY: bench-ui
bench-ui: build
	$(GO) run ./bench/ui -rackd bin/rackd $(BENCH_UI_FLAGS)

## bench-maas-api: MAAS's API vs rackd's own on bin/rackd: allocate+release round trips through
##   Juju's gomaasapi vs /api/v1, and listing 1,000 machines (NICs, disks) through machines/ vs
##   /api/v1/machines, p99 (loopback); flags through BENCH_MAAS_API_FLAGS, e.g. '-rounds 1000'
.PHONY: bench-maas-api
bench-maas-api: build
	$(GO) run ./bench/maasapi -rackd bin/rackd $(BENCH_MAAS_API_FLAGS)

## bench-power: the power queue against 1,000 simulated BMCs (50 ms a command), 5,000 requests
##   flags through BENCH_POWER_FLAGS, e.g. make bench-power BENCH_POWER_FLAGS='-p 64 -reps 5'
.PHONY: bench-power
bench-power:
	$(GO) run ./bench/power $(BENCH_POWER_FLAGS)

## bench-deps: install what bench-dhcp drives (perfdhcp, kea-dhcp4, dnsmasq, ip), only when missing
bench-deps:
	@bash bench/dhcp/deps.sh

## bench-redfish: status of 50 simulated Redfish BMCs (20 ms added to every
##   request) through rackd's Redfish driver vs a redfishtool loop (installs
##   redfishtool when missing); flags through BENCH_REDFISH_FLAGS, e.g. '-reps 5'
.PHONY: bench-redfish
bench-redfish:
	@bash bench/redfish/deps.sh
	$(GO) run ./bench/redfish $(BENCH_REDFISH_FLAGS)

## bench-ipmi: status of 50 ipmi_sim BMCs through rackd's IPMI driver vs an
##   ipmitool loop (root; installs openipmi and ipmitool when missing)
##   flags through BENCH_IPMI_FLAGS, e.g. make bench-ipmi BENCH_IPMI_FLAGS='-reps 3'
.PHONY: bench-ipmi
bench-ipmi:
	@bash bench/ipmi/deps.sh
	$(GO) run ./bench/ipmi $(BENCH_IPMI_FLAGS)

## bench-tftp: MB/s and server CPU per GB of rackd's TFTP vs tftpd-hpa, one client and a
##   50-client storm, curl (lock step) and atftp asking windowsize (root; network namespaces,
##   cgroups); flags through BENCH_TFTP_FLAGS, e.g. make bench-tftp BENCH_TFTP_FLAGS='-reps 5'
.PHONY: bench-tftp bench-bootconf
bench-tftp:
	@bash bench/tftp/deps.sh
	$(GO) run ./bench/tftp $(BENCH_TFTP_FLAGS)

## bench-bootconf: p50/p99 of rackd's per-MAC config answers over TFTP during boot storms (root)
bench-bootconf:
	@bash bench/tftp/deps.sh
	$(GO) run ./bench/tftp -bootconf $(BENCH_BOOTCONF_FLAGS)

clean:
	rm -rf bin dist
