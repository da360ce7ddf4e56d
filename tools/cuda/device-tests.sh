#!/bin/bash
# device-tests.sh BIN OUT [PHASE...]: runs Petal's kernel and model tests
# through the CUDA driver on an NVIDIA machine, from test binaries built
# elsewhere (tools/cuda/build.sh writes them, xz-compressed, into BIN), and
# writes one log per phase into OUT. Run from the repository root (the
# fixtures are read from engine/testdata). Phases, default all in order:
#   info      nvidia-smi, NVRTC and compute-sanitizer versions
#   unit      gpu/cuda's own tests (Open, NVRTC errors, every kernel compiled)
#   shaders   every shaders and shaders/selftest test
#   fixtures  every engine/gpumodel test (whole-model fixtures)
#   bench     shaders' benchmarks (dispatch overhead, QMV GB/s)
#   memcheck racecheck synccheck initcheck   compute-sanitizer over the
#             shaders tests ($SANITIZE_RUN narrows them with -test.run)
#   sanitize  all four tools at once, each over the shaders tests split
#             into $SANITIZE_CHUNKS (4) processes run side by side, a log
#             each ($tool-$chunk.log) and their error summaries in
#             sanitize.log; $SANITIZE_TOOLS narrows the tools, and each
#             test named in $SANITIZE_SPLIT runs as one process per
#             subtest instead (racecheck took over 400 s for a quarter of
#             TestSampleDistributions' 100,000 sampler draws), its
#             subtests listed by a run of it without the sanitizer
# fixtures reruns what fails with $PETAL_CUDA_GRAPHS=serial and =off, to
# tell a missing barrier (serial passes) from a kernel's fault.
# $UNIT_RUN, $SHADERS_RUN, $FIXTURES_RUN narrow the other phases; *_SECS
# bound each. Never pipe this script into head: a closed pipe kills the
# phase that is running.
set -u -o pipefail
BIN=$(cd "$1" && pwd)
OUT=$2
shift 2
PHASES=${*:-info unit shaders fixtures bench memcheck racecheck synccheck initcheck}
export PETAL_GPU=${PETAL_GPU:-cuda} # sim: a dry run of the script on any machine
export PETAL_CUDA_CACHE=${PETAL_CUDA_CACHE:-/tmp/petal-cuda-cache}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=$PATH:/usr/local/cuda/bin
ROOT=$(pwd)
for f in "$BIN"/*.xz; do
	[ -e "${f%.xz}" ] || xz -dk "$f"
done
chmod +x "$BIN"/*.test
# t NAME DIR SECONDS ARGS...: one test binary in its package directory.
t() {
	local name=$1 dir=$2 secs=$3
	shift 3
	echo "== $name $* ($(date -u +%T))"
	(cd "$ROOT/$dir" && timeout "$secs" "$@")
	echo "== $name exit $? ($(date -u +%T))"
}
status=0
for phase in $PHASES; do
	start=$(date +%s)
	case $phase in
	info)
		{ nvidia-smi; ls /usr/local/cuda/lib64/libnvrtc* ; compute-sanitizer --version; } >"$OUT/info.log" 2>&1 ;;
	unit)
		t unit gpu/cuda 120 "$BIN/cuda.test" -test.v -test.count=1 -test.run "${UNIT_RUN:-.}" 2>&1 | tee "$OUT/unit.log" | grep -E '^(--- |ok|FAIL|PASS|==)' ;;
	shaders)
		{ t shaders shaders ${SHADERS_SECS:-240} "$BIN/shaders.test" -test.v -test.count=1 -test.timeout 230s -test.run "${SHADERS_RUN:-.}"
		  t selftest shaders/selftest 90 "$BIN/selftest.test" -test.v -test.count=1; } 2>&1 | tee "$OUT/shaders.log" | grep -E '^(--- FAIL|ok|FAIL|PASS|==|panic)' ;;
	fixtures)
		t fixtures engine/gpumodel ${FIXTURES_SECS:-180} "$BIN/gpumodel.test" -test.v -test.count=1 -test.timeout 170s -test.run "${FIXTURES_RUN:-.}" 2>&1 | tee "$OUT/fixtures.log" | grep -E '^(--- FAIL|ok|FAIL|PASS|==|panic)'
		failed=$(grep -E '^--- FAIL' "$OUT/fixtures.log" | awk '{print $3}' | paste -sd'|')
		if [ -z "$failed" ] && ! grep -qE '^== fixtures exit 0' "$OUT/fixtures.log"; then
			echo "fixtures: the run ended without a verdict (timed out?)"; status=1
		fi
		[ -n "$failed" ] && status=1
		if [ -n "$failed" ]; then
			for mode in serial off; do
				(export PETAL_CUDA_GRAPHS=$mode; t "fixtures-$mode" engine/gpumodel 120 "$BIN/gpumodel.test" -test.v -test.count=1 -test.run "^($failed)\$" 2>&1 | tee -a "$OUT/fixtures.log" | grep -E '^(--- FAIL|ok|FAIL|PASS|==|panic)')
			done
		fi ;;
	bench)
		t bench shaders ${BENCH_SECS:-120} "$BIN/shaders.test" -test.run '^$' -test.bench 'DispatchOverhead|QMV' -test.benchtime 200x 2>&1 | tee "$OUT/bench.log" | grep -E 'Benchmark|==' ;;
	memcheck | racecheck | synccheck | initcheck)
		t "$phase" shaders ${SANITIZE_SECS:-150} compute-sanitizer --tool "$phase" --print-limit 20 --error-exitcode 9 \
			"$BIN/shaders.test" -test.v -test.count=1 -test.run "${SANITIZE_RUN:-.}" 2>&1 | tee "$OUT/$phase.log" | grep -E '(ERROR SUMMARY|^ok|^FAIL|^PASS|^==)' ;;
	sanitize)
		tools=${SANITIZE_TOOLS:-memcheck racecheck synccheck initcheck}
		names=$(cd "$ROOT/shaders" && "$BIN/shaders.test" -test.list "${SANITIZE_RUN:-.}" | grep '^Test')
		split=""
		for s in ${SANITIZE_SPLIT:-}; do
			echo "$names" | grep -qx "$s" || { echo "sanitize: $s is not among the tests listed"; status=1; continue; }
			names=$(echo "$names" | grep -vx "$s")
			# Each subtest's full name, from a run without the sanitizer.
			subs=$(cd "$ROOT/shaders" && timeout 120 "$BIN/shaders.test" -test.v -test.count=1 -test.run "^$s\$" |
				sed -n 's/^=== RUN   \('"$s"'\/.*\)$/\1/p')
			[ -n "$subs" ] || { echo "sanitize: $s listed no subtests"; status=1; }
			split="$split $subs"
		done
		n=${SANITIZE_CHUNKS:-4}
		for tool in $tools; do
			for c in $(seq 0 $((n - 1))); do
				echo "$names" | awk -v n="$n" -v c="$c" 'NR % n == c' >"$OUT/$tool-$c.names"
				re=$(paste -sd'|' "$OUT/$tool-$c.names")
				t "$tool-$c" shaders ${SANITIZE_SECS:-300} compute-sanitizer --tool "$tool" --print-limit 20 --error-exitcode 9 \
					"$BIN/shaders.test" -test.v -test.count=1 -test.run "^($re)\$" >"$OUT/$tool-$c.log" 2>&1 &
			done
			k=0
			for sub in $split; do
				# Every element of the name anchored, its dots literal:
				# the pattern matches this subtest alone.
				re=$(echo "$sub" | sed 's/\./\\./g; s/[^/]*/^&$/g')
				echo "$sub" >"$OUT/$tool-s$k.names"
				t "$tool-s$k" shaders ${SANITIZE_SECS:-300} compute-sanitizer --tool "$tool" --print-limit 20 --error-exitcode 9 \
					"$BIN/shaders.test" -test.v -test.count=1 -test.run "$re" >"$OUT/$tool-s$k.log" 2>&1 &
				k=$((k + 1))
			done
		done
		wait
		[ -n "$names$split" ] || { echo "sanitize: no tests listed" | tee "$OUT/sanitize.log"; status=1; }
		# A process is clean only when every test listed for it finished
		# (a subtest by its own line), none failed, the tool printed its
		# summary with 0 errors and exited 0.
		for f in "$OUT"/{memcheck,racecheck,synccheck,initcheck}-*.log; do
			[ -e "$f" ] || continue
			listed=$(wc -l <"${f%.log}.names")
			passed=0
			while read -r name; do
				grep -qE "^ *--- PASS: $(echo "$name" | sed 's/[.^$*+?()|[\]/\\&/g') \(" "$f" && passed=$((passed + 1))
			done <"${f%.log}.names"
			failed=$(grep -cE '^ *--- FAIL: Test' "$f")
			summary=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$f" | tail -1)
			rc=$(grep -E '^== .* exit' "$f" | awk '{print $4}')
			verdict=clean
			if [ "$passed" != "$listed" ] || [ "$failed" != 0 ] || [ "$rc" != 0 ] || ! echo "$summary" | grep -q '(0 errors\|: 0 errors'; then
				verdict=INCOMPLETE; status=1
			fi
			echo "$(basename "$f"): $verdict; $passed of $listed tests passed, $failed failed; ${summary:-no summary}; exit $rc"
		done | tee "$OUT/sanitize.log"
		grep -q INCOMPLETE "$OUT/sanitize.log" && status=1 ;;
	esac
	echo "phase $phase: $(( $(date +%s) - start )) s"
done
exit $status
