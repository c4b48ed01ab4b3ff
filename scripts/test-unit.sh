#!/usr/bin/env bash
# make test's tests: `go test -race` over every package and, beside it, the
# real-VM tests that skip unless asked for, each in a go test of its own:
#   - the Debian deploy tests of package e2e (TestE2EDebianLocalBoot/uefi and
#     TestE2EDeployOS, RACKD_E2E_DEPLOY_OS=1). The BIOS half of
#     TestE2EDebianLocalBoot is left to make e2e-deploy-os: TestE2EDeployOS
#     boots the same image from its disk under SeaBIOS.
#   - the appliance image's tests of package e2e/appliance (TestApplianceBoot
#     under OVMF, TestApplianceLifecycle: enlistment through the appliance,
#     refused bundles, an update, a rollback; RACKD_E2E_APPLIANCE=1). The
#     SeaBIOS boot of the appliance and the power loss in the middle of an
#     update (TestAppliancePowerLoss) are left to make e2e-appliance: this
#     run is the longest of make test (three image builds and a dozen boots
#     under TCG), and make test must stay within half an hour on two cores.
#   - the store's tests again with RACKD_STORE_ENGINE=etcd: the same suite on
#     a real etcd (one member on loopback) instead of a database file.
# They spend most of their time in QEMU under TCG, mostly waiting on the VM:
# run after the rest of the suite they would double make test's time, run
# beside it they overlap it.
#
# Their output is printed when all are done; any run failing fails make
# test. Environment: GO (default go), RACKD_E2E_SKIP_DEPLOY_OS=1 and
# RACKD_E2E_SKIP_APPLIANCE=1 leave those tests out (they skip by themselves
# when not root or without QEMU).
set -uo pipefail

go=${GO:-go}
logs=$(mktemp -d)
pids=() names=() cmds=() main_pid=
# Every go test runs in the background in a process group of its own and
# the script waits on them: bash runs a trap only once its foreground
# command ends, and an interrupted make test must leave none behind.
cleanup() {
	for pid in $main_pid ${pids[@]+"${pids[@]}"}; do
		if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
			kill -TERM -- "-$pid" 2>/dev/null
			wait "$pid" 2>/dev/null
		fi
	done
	rm -rf "$logs"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# beside NAME ENV... -- GO-TEST-ARGS...: one go test run beside the suite.
beside() {
	local name=$1 env=()
	shift
	while [ "$1" != -- ]; do
		env+=("$1")
		shift
	done
	shift
	env "${env[@]}" CGO_ENABLED=1 setsid "$go" test -race -count=1 "$@" >"$logs/${#pids[@]}" 2>&1 &
	pids+=($!) names+=("$name") cmds+=("${env[*]} go test $*")
}

if [ -z "${RACKD_E2E_SKIP_DEPLOY_OS:-}" ]; then
	beside "the Debian deploy tests" RACKD_E2E_DEPLOY_OS=1 -- \
		-timeout 45m -run 'TestE2EDebianLocalBoot/uefi|TestE2EDeployOS$' ./e2e/
fi
if [ -z "${RACKD_E2E_SKIP_APPLIANCE:-}" ]; then
	beside "the appliance image's tests" RACKD_E2E_APPLIANCE=1 -- \
		-timeout 50m -run 'TestApplianceBoot/uefi|TestApplianceLifecycle' ./e2e/appliance/
fi
# The store's whole suite once more, on a real etcd instead of its
# database file (store/kv/etcdkv; the test starts its own etcd member).
beside "the store's tests on etcd" RACKD_STORE_ENGINE=etcd -- -timeout 15m ./store/
CGO_ENABLED=1 setsid "$go" test -race -count=1 -timeout 20m ./... &
main_pid=$!
wait "$main_pid"
rc=$?
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
