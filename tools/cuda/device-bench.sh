#!/bin/bash
# device-bench.sh: one device call for REPORT-2026-12-02.md. The 35B bench
# (h19bench's tools/cuda/bench.sh) at 256 and 4096, then 32768 with time
# bounds, a profiled run at 256, memcheck and racecheck over a subset of the
# shaders tests, fixture reruns; everything under $OUT (8 files at most).
# Prepare here: tools/cuda/build.sh .devcarry/h19cuda (test binaries) and
# petal.gz + synth35b.gz in .devcarry/h19cuda-bench (see bench.sh's header);
# run from the repository root with carry [".devcarry/h19cuda",
# ".devcarry/h19cuda-bench"]: bash .devcarry/h19cuda/device-bench.sh
set -u
B=.devcarry/h19cuda-bench; T=.devcarry/h19cuda
X=$OUT/extra.log
export PETAL_CUDA_CACHE=/tmp/pcc LD_LIBRARY_PATH=/usr/local/cuda/lib64 PYTHONUNBUFFERED=1
BIN=$B CONTEXTS=256,4096 timeout 300 bash tools/cuda/bench.sh > /dev/null 2>&1
echo "bench.sh 256,4096 done at $SECONDS s" >> $X
echo "== petal 32768 $(date -u +%T)" >> $X
timeout 130 $B/petal bench --backend cuda --model /tmp/q36 --contexts 32768 --steps 64 > $OUT/petal-cuda-32768.json 2>> $X
echo "== exit $? at $SECONDS s; peer 32768" >> $X
timeout 110 python3 tools/cuda/peer.py --model /tmp/q36 --contexts 32768 --steps 64 --out $OUT/peer-32768.json > /dev/null 2>> $X
echo "== exit $? at $SECONDS s; profiled petal 256" >> $X
PETAL_CUDA_PROFILE=1 timeout 60 $B/petal bench --backend cuda --model /tmp/q36 --contexts 256 --steps 64 >> $X 2>&1
echo "== exit $? at $SECONDS s; sanitizers" >> $X
# The gpumodel test binary finds its fixtures by the path it was built at.
mkdir -p /work/wt && ln -sfn "$(pwd)" /work/wt/h19cuda
R='TestArgmax|TestRMSNorm|TestQMV$|TestAttnDecode|TestQMM|TestDeltaStep|TestRouterTopK$|TestSampleMatchesCPU|TestAttnPrefill|TestMoEGrouped'
for tool in memcheck racecheck; do
	S=$(( 540 - SECONDS )); [ $S -gt 70 ] && S=70; [ $S -lt 10 ] && break
	SANITIZE_RUN="$R" SANITIZE_SECS=$S bash $T/device-tests.sh $T /tmp $tool >> $X 2>&1
	grep -E "^(=== RUN|--- FAIL|=====)" /tmp/$tool.log | grep -v "^=== RUN.*/" | tail -25 >> $X
done
S=$(( 560 - SECONDS )); [ $S -gt 40 ] && S=40
[ $S -gt 10 ] && FIXTURES_SECS=$S FIXTURES_RUN='TestMLXLayout|TestDecodeLogprobs' bash $T/device-tests.sh $T /tmp fixtures >> $X 2>&1
echo "all done at $SECONDS s" >> $X
