#!/bin/bash
# Call A (2026-12-02, second session): the tests through the CUDA driver with graphs, and the
# four sanitizers over every shaders test at once.
set -u
[ "$(pwd)" = /work/main ] || { mkdir -p /work && ln -sfn "$(pwd)" /work/main; }
T=.devcarry/s2t; L=/tmp/L; mkdir -p $L
for f in $T/*.xz; do xz -dk "$f"; done; chmod +x $T/*.test
SANITIZE_SECS=430 bash tools/cuda/device-tests.sh $T $L sanitize > $L/sanitize.out 2>&1 &
SP=$!
UNIT_SECS=100 bash tools/cuda/device-tests.sh $T $L info unit shaders fixtures bench > $L/main.out 2>&1
echo "main done at $SECONDS s" >> $L/main.out
wait $SP
echo "sanitize done at $SECONDS s" >> $L/main.out
tar czf $OUT/logs.tgz -C /tmp L
cp $L/main.out $L/sanitize.out $OUT/
tail -c 5000 $L/main.out; cat $L/sanitize.log 2>/dev/null
