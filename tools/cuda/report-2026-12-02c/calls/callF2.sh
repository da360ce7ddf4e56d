#!/bin/bash
# Call F2 (2026-12-02, third session, on the machine call F left warm): the fixtures alone, since
# in call F they ran beside 17 racecheck processes and hit the test binary's 170 s timeout.
mkdir -p /work/wt && ln -sfn "$(pwd)" /work/wt/lead; B=.devcarry/s3
for f in $B/*.xz; do [ -e ${f%.xz} ] || xz -dk $f; done; mkdir -p /tmp/R2
FIXTURES_SECS=300 bash $B/device-tests.sh $B /tmp/R2 fixtures > /tmp/R2/out.txt 2>&1; echo exit $?
tar czf $OUT/r2.tgz -C /tmp R2
