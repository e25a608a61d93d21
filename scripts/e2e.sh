#!/usr/bin/env bash
# Runs the e2e tests (./e2e) for `make test-e2e`: every top-level test in a
# process of its own, E2E_JOBS (default 2) processes at once.
#
# Why not one `go test ./e2e/`: an e2e test spends most of its time waiting
# on Nomad and Consul (heartbeats, health, drains, deadlines), not on the
# CPU, so one test at a time left a 2-core machine half idle and made a CI
# run from a fresh clone take more than an hour. A process per test keeps
# every test's agents, ports and package state its own, as when it runs
# alone, and a worker that finishes takes the next test, so a long test
# never holds back a fixed shard.
#
# Each test's output is printed whole when it ends (never interleaved),
# followed by a line "e2e: ok|FAIL <test> in <n>s"; the run ends with the
# list of failures. The exit status is 1 when any test failed or did not
# report.
#
# Environment: E2E_JOBS (processes at once), E2E_TIMEOUT (each test's
# -test.timeout, default 45m), E2E_RUN (a -test.run regexp choosing the
# tests, default every test), NSS_E2E_DAEMON (a built nomad-statefulset for
# the tests to run; default: each test process builds its own).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
jobs="${E2E_JOBS:-2}"
timeout="${E2E_TIMEOUT:-45m}"
run="${E2E_RUN:-.}"

work="$(mktemp -d "${TMPDIR:-/tmp}/nss-e2e-XXXXXX")"
trap 'rm -rf "${work}"' EXIT
bin="${work}/e2e.test"
(cd "${root}" && go test -c -o "${bin}" ./e2e/)

# The longest tests first (measured in CI on 2 cores), so that the last
# ones to start are short and the workers finish together. A test not named
# here runs after these, in the binary's order; a name that no longer
# exists is ignored.
long_first=(
	TestPostgres
	TestNATSTutorial
	TestReadinessConsulCheckStopsRollout
	TestPurgedNodeReplacedOnNewVolume
	TestSteadyStateMakesNoWrites
	TestNATS
	TestChildVerbsUnderEveryPolicy
	TestStorage
	TestVerbs
	TestVerbPurgeWhileLeadershipMoves
)

mapfile -t all < <(cd "${root}/e2e" && "${bin}" -test.list "${run}" | grep '^Test' || true)
if [[ ${#all[@]} -eq 0 ]]; then
	echo "e2e: no test matches E2E_RUN=${run}" >&2
	exit 1
fi
declare -A listed=() queued=()
for t in "${all[@]}"; do listed[$t]=1; done
order=()
for t in "${long_first[@]}"; do
	if [[ -n "${listed[$t]:-}" ]]; then order+=("$t"); queued[$t]=1; fi
done
for t in "${all[@]}"; do
	[[ -n "${queued[$t]:-}" ]] || order+=("$t")
done

echo "e2e: ${#order[@]} tests, ${jobs} at a time"

run_one() { # test name
	local name="$1" rc=0 start=$SECONDS verdict=ok
	(cd "${E2E_ROOT}/e2e" && "${E2E_BIN}" -test.run "^${name}\$" -test.count=1 -test.timeout "${E2E_TEST_TIMEOUT}" -test.v) \
		>"${E2E_WORK}/${name}.log" 2>&1 || rc=$?
	echo "${rc}" >"${E2E_WORK}/${name}.rc"
	[[ ${rc} -eq 0 ]] || verdict=FAIL
	{
		flock 9
		cat "${E2E_WORK}/${name}.log"
		echo "e2e: ${verdict} ${name} in $((SECONDS - start))s"
	} 9>"${E2E_WORK}/print.lock"
}
export -f run_one
export E2E_ROOT="${root}" E2E_BIN="${bin}" E2E_WORK="${work}" E2E_TEST_TIMEOUT="${timeout}"

start=$SECONDS
printf '%s\n' "${order[@]}" | xargs -P "${jobs}" -I{} bash -c 'run_one "$1"' _ {} || true

failed=()
for t in "${order[@]}"; do
	rc="$(cat "${work}/${t}.rc" 2>/dev/null || echo "no report")"
	[[ "${rc}" == 0 ]] || failed+=("${t} (exit status ${rc})")
done
echo "e2e: ${#order[@]} tests in $((SECONDS - start))s, ${jobs} at a time; ${#failed[@]} failed"
if [[ ${#failed[@]} -gt 0 ]]; then
	# Each failed test's own last lines (its logs and errors, not the
	# agents' logs it dumps), so that the cause is in the tail of a long
	# CI log.
	for t in "${order[@]}"; do
		[[ "$(cat "${work}/${t}.rc" 2>/dev/null)" == 0 ]] && continue
		echo "e2e: the last lines ${t} logged:"
		grep -E '^ {4}[A-Za-z0-9_]+_test\.go:[0-9]+: ' "${work}/${t}.log" | grep -v 'testagent: ' | tail -n 8 | cut -c1-400 || true
	done
	printf 'e2e: FAIL %s\n' "${failed[@]}"
	exit 1
fi
