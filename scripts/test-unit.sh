#!/usr/bin/env bash
# make test's checks and tests, overlapped so that make test stays within
# half an hour on two cores:
#   1. at once, in the background, the test images, each on its own: the
#      enlistment image (RACKD_MAKE_ENLIST_IMAGE, make test's `make
#      enlist-image`) and the Debian images (RACKD_MAKE_DEBIAN_IMAGE, `make
#      debian-image`): minutes of downloads, mmdebstrap and compression, much
#      of it waiting on the network and the disk;
#   2. meanwhile go vet, then `go test -race` over every package that boots
#      no image, and beside it the store's whole suite again with
#      RACKD_STORE_ENGINE=etcd (a real etcd, one member on loopback, instead
#      of the database file);
#   3. as soon as an image is built, the runs that boot it, each a go test
#      of its own beside the rest. The enlistment image's:
#      - ./e2e's default tests (enlistment, commissioning, deployment, the
#        console) and ./nocloud (its kernel). TestE2ERedfishCommissionDeploy
#        and TestE2EBMCSetup are make e2e's (RACKD_E2E_ALL=1): their
#        protocols meet their real peers outside a VM too;
#      - the appliance image's TestApplianceLifecycle (package
#        e2e/appliance, RACKD_E2E_APPLIANCE=1: a first boot under OVMF with
#        what TestApplianceBoot checks of it, enlistment through the
#        appliance, refused bundles, an update, a rollback), which builds
#        the appliance's images from it. TestApplianceBoot (OVMF and
#        SeaBIOS) and the power loss in the middle of an update
#        (TestAppliancePowerLoss) are left to make e2e-appliance: this run
#        is the longest of make test (three image builds and boots under
#        TCG).
#      The Debian images': the Debian deploy tests of package e2e
#      (TestE2EDebianLocalBoot/uefi and TestE2EDeployOS,
#      RACKD_E2E_DEPLOY_OS=1), and beside them docs/GETTING-STARTED.md's
#      commands run in order (TestE2EGettingStarted: make lab, two machines
#      commissioned through IPMI and Redfish, one deployed, an SSH login,
#      make lab-down; it waits on the enlistment image's lock if that is
#      still being built). The BIOS half of TestE2EDebianLocalBoot is
#      left to make e2e-deploy-os: TestE2EDeployOS boots the same image from
#      its disk under SeaBIOS.
# The real-VM tests spend most of their time in QEMU under TCG: run after
# the rest they would double make test's time.
#
# Every run's output is printed when all are done; any failing fails make
# test (an image that failed to build fails it without the runs that boot
# it). Environment: GO (default go), RACKD_MAKE_ENLIST_IMAGE and
# RACKD_MAKE_DEBIAN_IMAGE (the commands building the images; the runs start
# at once when empty), RACKD_E2E_SKIP_DEPLOY_OS=1 and
# RACKD_E2E_SKIP_APPLIANCE=1 leave those tests out (they skip by themselves
# when not root or without QEMU).
set -uo pipefail

go=${GO:-go}
logs=$(mktemp -d)
pids=() names=() cmds=() failed=() main_pid=
# Every job runs in the background in a process group of its own and the
# script waits on them: bash runs a trap only once its foreground command
# ends, and an interrupted make test must leave none behind.
cleanup() {
	for pid in $main_pid ${image_pid[@]+"${image_pid[@]}"} ${pids[@]+"${pids[@]}"}; do
		if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
			kill -TERM -- "-$pid" 2>/dev/null
			wait "$pid" 2>/dev/null
		fi
	done
	rm -rf "$logs"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# summarize NAME LOG: the lines of a go test run's output LOG that say
# what failed: the failed tests, the last lines the tests logged (the
# failure's own among them), panics, timeouts and the failed packages.
summarize() {
	echo "--- $1:"
	grep -a -E -e '^[[:space:]]*--- FAIL' -e '^[[:space:]]+[A-Za-z0-9_]+\.go:[0-9]+: ' \
		-e '^panic: ' -e '^FAIL' -e 'test timed out' -e '^fatal error' "$2" | cut -c1-400 | tail -n 60
}

# beside NAME ENV... -- GO-TEST-ARGS...: one go test run beside the rest.
beside() {
	local name=$1 env=()
	shift
	while [ "$1" != -- ]; do
		env+=("$1")
		shift
	done
	shift
	env "${env[@]}" CGO_ENABLED=1 setsid "$go" test -race -count=1 "$@" >"$logs/${#pids[@]}" 2>&1 &
	pids+=($!) names+=("$name") cmds+=("${env[*]:+${env[*]} }go test $*")
}

# The test images, each built in the background: the enlistment image
# (RACKD_MAKE_ENLIST_IMAGE) and the Debian images (RACKD_MAKE_DEBIAN_IMAGE).
declare -A image_cmd=() image_pid=()
image_cmd[enlist]=${RACKD_MAKE_ENLIST_IMAGE:-}
image_cmd[debian]=${RACKD_MAKE_DEBIAN_IMAGE:-}
for img in enlist debian; do
	if [ -n "${image_cmd[$img]}" ]; then
		setsid bash -c "${image_cmd[$img]}" >"$logs/image-$img" 2>&1 &
		image_pid[$img]=$!
	fi
done

rc=0
"$go" vet ./... || rc=1

# The packages that boot a test image wait for it.
mapfile -t pkgs < <("$go" list ./... | grep -v -x -e rackd/e2e -e rackd/e2e/appliance -e rackd/nocloud)

# The store's whole suite once more, on a real etcd instead of its
# database file (store/kv/etcdkv; the test starts its own etcd member).
beside "the store's tests on etcd" RACKD_STORE_ENGINE=etcd -- -timeout 15m ./store/
CGO_ENABLED=1 setsid "$go" test -race -count=1 -timeout 20m "${pkgs[@]}" > >(tee "$logs/main") 2>&1 &
main_pid=$!

# with_image IMG: start the runs that need image IMG.
with_image() {
	case $1 in
	enlist)
		beside "the packages that boot the enlistment image" -- -timeout 30m ./e2e/ ./nocloud/
		if [ -z "${RACKD_E2E_SKIP_APPLIANCE:-}" ]; then
			beside "the appliance image's tests" RACKD_E2E_APPLIANCE=1 -- \
				-timeout 50m -run 'TestApplianceLifecycle' ./e2e/appliance/
		fi
		;;
	debian)
		if [ -z "${RACKD_E2E_SKIP_DEPLOY_OS:-}" ]; then
			beside "the Debian deploy tests" RACKD_E2E_DEPLOY_OS=1 -- \
				-timeout 45m -run 'TestE2EDebianLocalBoot/uefi|TestE2EDeployOS$' ./e2e/
			beside "the getting-started guide on make lab" RACKD_E2E_DEPLOY_OS=1 -- \
				-timeout 45m -run 'TestE2EGettingStarted$' ./e2e/
		fi
		;;
	esac
}
# Each image's runs start as soon as it is built, whichever comes first.
for img in enlist debian; do
	[ -n "${image_cmd[$img]}" ] || with_image "$img"
done
while [ "${#image_pid[@]}" -gt 0 ]; do
	finished=
	wait -n -p finished "${image_pid[@]}"
	irc=$?
	for img in "${!image_pid[@]}"; do
		[ "${image_pid[$img]}" = "$finished" ] || continue
		unset "image_pid[$img]"
		echo "--- the $img image (${image_cmd[$img]}):"
		cat "$logs/image-$img"
		if [ "$irc" -eq 0 ]; then
			with_image "$img"
		else
			echo "--- the $img image failed to build: the tests that boot it did not run" >&2
			rc=1
		fi
	done
done

wait "$main_pid"
main_rc=$?
[ "$main_rc" -eq 0 ] || rc=1
main_pid=
for i in ${pids[@]+"${!pids[@]}"}; do
	wait "${pids[$i]}"
	brc=$?
	pids[i]=
	echo "--- ${names[$i]} (${cmds[$i]}):"
	cat "$logs/$i"
	if [ "$brc" -ne 0 ]; then
		rc=1
		failed+=("$i")
	fi
done
# A failed test prints its whole log, a rackd's goroutine dump included: the
# tail of make test's output says which tests failed and where, and how
# each failing run ended.
if [ "$main_rc" -ne 0 ] || [ "${#failed[@]}" -gt 0 ]; then
	echo "--- make test failed; the failures, as each run printed them:"
	[ "$main_rc" -eq 0 ] || summarize "the packages that boot no image" "$logs/main"
	for i in ${failed[@]+"${failed[@]}"}; do
		summarize "${names[$i]}" "$logs/$i"
	done
fi
exit "$rc"
