#!/usr/bin/env bash
# make test's tests: `go test -race` over every package and, beside it in a
# second go test, the Debian deploy tests of package e2e
# (TestE2EDebianLocalBoot/uefi and TestE2EDeployOS, which skip unless
# RACKD_E2E_DEPLOY_OS is set). Those two spend most of a quarter hour in
# QEMU under TCG, mostly waiting on the VM: run after the rest of the suite
# they would double make test's time, run beside it they overlap it. The
# BIOS half of TestE2EDebianLocalBoot is left to make e2e-deploy-os:
# TestE2EDeployOS boots the same image from its disk under SeaBIOS.
#
# The second run's output is printed when both are done. Environment: GO
# (default go), RACKD_E2E_SKIP_DEPLOY_OS=1 leaves the Debian tests out
# (they skip by themselves when not root or without QEMU).
set -uo pipefail

go=${GO:-go}
run='TestE2EDebianLocalBoot/uefi|TestE2EDeployOS$'
log=$(mktemp)
deploy_pid= main_pid=
# Both go tests run in the background and the script waits on them: bash
# runs a trap only once its foreground command ends, and an interrupted
# make test must not leave either behind.
cleanup() {
	for pid in $main_pid $deploy_pid; do
		if kill -0 "$pid" 2>/dev/null; then
			kill -TERM -- "-$pid" 2>/dev/null
			wait "$pid" 2>/dev/null
		fi
	done
	rm -f "$log"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -z "${RACKD_E2E_SKIP_DEPLOY_OS:-}" ]; then
	RACKD_E2E_DEPLOY_OS=1 CGO_ENABLED=1 setsid "$go" test -race -count=1 -timeout 45m -run "$run" ./e2e/ >"$log" 2>&1 &
	deploy_pid=$!
fi
CGO_ENABLED=1 setsid "$go" test -race -count=1 -timeout 20m ./... &
main_pid=$!
wait "$main_pid"
rc=$?
main_pid=
if [ -n "$deploy_pid" ]; then
	wait "$deploy_pid"
	drc=$?
	deploy_pid=
	echo "--- the Debian deploy tests (RACKD_E2E_DEPLOY_OS=1 go test -run '$run' ./e2e/):"
	cat "$log"
	[ "$drc" -eq 0 ] || rc=1
fi
exit "$rc"
