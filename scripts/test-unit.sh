#!/usr/bin/env bash
# make test's checks and tests, overlapped so that make test stays within
# half an hour on two cores:
#   1. at once, in the background: the test images (RACKD_TEST_IMAGES, make
#      test's `make enlist-image debian-image`: minutes of downloads,
#      mmdebstrap and compression, much of it waiting on the network and the
#      disk);
#   2. meanwhile go vet, then `go test -race` over every package that needs
#      no test image, and beside it the store's whole suite again with
#      RACKD_STORE_ENGINE=etcd (a real etcd, one member on loopback, instead
#      of the database file);
#   3. once the images are built, the packages that boot them, each in a go
#      test of its own beside the rest:
#      - ./e2e's default tests (enlistment, commissioning, deployment,
#        Redfish, BMC set-up, the console) and ./nocloud (its kernel);
#      - the Debian deploy tests of package e2e (TestE2EDebianLocalBoot/uefi
#        and TestE2EDeployOS, RACKD_E2E_DEPLOY_OS=1). The BIOS half of
#        TestE2EDebianLocalBoot is left to make e2e-deploy-os:
#        TestE2EDeployOS boots the same image from its disk under SeaBIOS;
#      - the appliance image's tests of package e2e/appliance
#        (TestApplianceBoot under OVMF, TestApplianceLifecycle: enlistment
#        through the appliance, refused bundles, an update, a rollback;
#        RACKD_E2E_APPLIANCE=1). The SeaBIOS boot of the appliance and the
#        power loss in the middle of an update (TestAppliancePowerLoss) are
#        left to make e2e-appliance: this run is the longest of make test
#        (three image builds and a dozen boots under TCG).
# The real-VM tests spend most of their time in QEMU under TCG, much of it
# waiting on the VM: run after the rest they would double make test's time.
#
# Every run's output is printed when all are done; any failing fails make
# test (a failed image build fails it without the tests that need it).
# Environment: GO (default go), RACKD_TEST_IMAGES (the command building the
# images; none when empty), RACKD_E2E_SKIP_DEPLOY_OS=1 and
# RACKD_E2E_SKIP_APPLIANCE=1 leave those tests out (they skip by themselves
# when not root or without QEMU).
set -uo pipefail

go=${GO:-go}
logs=$(mktemp -d)
pids=() names=() cmds=() main_pid= images_pid=
# Every job runs in the background in a process group of its own and the
# script waits on them: bash runs a trap only once its foreground command
# ends, and an interrupted make test must leave none behind.
cleanup() {
	for pid in $main_pid $images_pid ${pids[@]+"${pids[@]}"}; do
		if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
			kill -TERM -- "-$pid" 2>/dev/null
			wait "$pid" 2>/dev/null
		fi
	done
	rm -rf "$logs"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

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

if [ -n "${RACKD_TEST_IMAGES:-}" ]; then
	setsid bash -c "$RACKD_TEST_IMAGES" >"$logs/images" 2>&1 &
	images_pid=$!
fi

rc=0
"$go" vet ./... || rc=1

# The packages that boot the test images wait for them.
vm_pkgs=(./e2e/ ./e2e/appliance/ ./nocloud/)
mapfile -t pkgs < <("$go" list ./... | grep -v -x -e rackd/e2e -e rackd/e2e/appliance -e rackd/nocloud)

# The store's whole suite once more, on a real etcd instead of its
# database file (store/kv/etcdkv; the test starts its own etcd member).
beside "the store's tests on etcd" RACKD_STORE_ENGINE=etcd -- -timeout 15m ./store/
CGO_ENABLED=1 setsid "$go" test -race -count=1 -timeout 20m "${pkgs[@]}" &
main_pid=$!

images_rc=0
if [ -n "$images_pid" ]; then
	wait "$images_pid"
	images_rc=$?
	images_pid=
	echo "--- the test images ($RACKD_TEST_IMAGES):"
	cat "$logs/images"
fi
if [ "$images_rc" -ne 0 ]; then
	echo "--- the test images failed to build: ${vm_pkgs[*]} not run" >&2
	rc=1
else
	beside "the packages that boot the test images" -- -timeout 30m "${vm_pkgs[@]}"
	if [ -z "${RACKD_E2E_SKIP_DEPLOY_OS:-}" ]; then
		beside "the Debian deploy tests" RACKD_E2E_DEPLOY_OS=1 -- \
			-timeout 45m -run 'TestE2EDebianLocalBoot/uefi|TestE2EDeployOS$' ./e2e/
	fi
	if [ -z "${RACKD_E2E_SKIP_APPLIANCE:-}" ]; then
		beside "the appliance image's tests" RACKD_E2E_APPLIANCE=1 -- \
			-timeout 50m -run 'TestApplianceBoot/uefi|TestApplianceLifecycle' ./e2e/appliance/
	fi
fi

wait "$main_pid" || rc=1
main_pid=
for i in ${pids[@]+"${!pids[@]}"}; do
	wait "${pids[$i]}"
	brc=$?
	pids[i]=
	echo "--- ${names[$i]} (${cmds[$i]}):"
	cat "$logs/$i"
	[ "$brc" -eq 0 ] || rc=1
done
exit "$rc"
