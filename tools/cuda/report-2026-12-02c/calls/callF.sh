#!/bin/bash
# Call F (2026-12-02, third session): racecheck over every shaders test, TestSampleDistributions
# as one process per subtest (SANITIZE_SPLIT), and, side by side, the driver, shaders, selftest
# and fixture tests of main at 389b252 (built by tools/cuda/build.sh into .devcarry/s3, petal left
# out). Outputs: one tarball, r.tgz.
set -u
B=.devcarry/s3; R=/tmp/R; mkdir -p $R/tests $R/san
# The gpumodel test binary reads its fixtures by the path it was built at.
mkdir -p /work/wt && ln -sfn "$(pwd)" /work/wt/lead
for f in $B/*.xz; do xz -dk "$f"; done
(SANITIZE_TOOLS=racecheck SANITIZE_SPLIT=TestSampleDistributions SANITIZE_SECS=480 \
	bash $B/device-tests.sh $B $R/san sanitize >$R/san/out.txt 2>&1
 echo "sanitize exit $? at $SECONDS s" >>$R/log.txt) &
(bash $B/device-tests.sh $B $R/tests info unit shaders fixtures >$R/tests/out.txt 2>&1
 echo "tests exit $? at $SECONDS s" >>$R/log.txt) &
wait
tar czf $OUT/r.tgz -C /tmp R
cat $R/log.txt $R/san/sanitize.log
grep -E '^(--- FAIL|ok|FAIL|PASS|==|phase|fixtures)' $R/tests/out.txt | tail -40
