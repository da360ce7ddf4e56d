#!/bin/bash
# Call D (2026-12-02, second session): the qmv kernels with their declared 64-thread threadgroup
# (no register spills). Racecheck of the two sampler-distribution subtests (one per list path) and
# memcheck of the qmv tests while the checkpoint is written; the shaders and fixture tests through
# the CUDA driver; the 35B bench at 256 and 4096 (graphs by levels), at 256 with serial graphs,
# and the two profiled runs at 256. All outputs in one tarball.
set -u
B=.devcarry/s2d; R=/tmp/R; mkdir -p $R
[ "$(pwd)" = /work/main ] || { mkdir -p /work && ln -sfn "$(pwd)" /work/main; }
export PETAL_CUDA_CACHE=/tmp/pcc LD_LIBRARY_PATH=/usr/local/cuda/lib64 PATH=$PATH:/usr/local/cuda/bin PETAL_GPU=cuda
for b in petal synth35b; do gunzip -f $B/$b.gz; chmod +x $B/$b; done
for f in $B/*.xz; do xz -dk "$f"; done; chmod +x $B/*.test
(cd shaders && timeout 200 compute-sanitizer --tool racecheck --print-limit 20 --error-exitcode 9 ../$B/shaders.test -test.v -test.count=1 \
	-test.run '^TestSampleDistributions$/^n=(12|160)$/^(T=1|top_p=0.9)$') > $R/racecheck-sampledist.log 2>&1 &
S1=$!
(cd shaders && timeout 200 compute-sanitizer --tool memcheck --print-limit 20 --error-exitcode 9 ../$B/shaders.test -test.v -test.count=1 \
	-test.run 'QMV|MoEDownCombine|Dense') > $R/memcheck-qmv.log 2>&1 &
S2=$!
$B/synth35b --out /tmp/q36 --layers 40 > $R/synth.txt 2>&1; sync
echo "synth at $SECONDS s" >> $R/log.txt
wait $S1; echo "racecheck sampledist exit $? at $SECONDS s" >> $R/log.txt
wait $S2; echo "memcheck qmv exit $? at $SECONDS s" >> $R/log.txt
(cd shaders && timeout 120 ../$B/shaders.test -test.v -test.count=1) > $R/shaders.log 2>&1
echo "shaders exit $? at $SECONDS s" >> $R/log.txt
(cd engine/gpumodel && timeout 170 ../../$B/gpumodel.test -test.v -test.count=1) > $R/fixtures.log 2>&1
echo "fixtures exit $? at $SECONDS s" >> $R/log.txt
timeout 100 $B/petal bench --backend cuda --model /tmp/q36 --contexts 256,4096 --steps 64 > $R/petal-cuda.json 2>> $R/log.txt
echo "petal 256,4096 exit $? at $SECONDS s" >> $R/log.txt
PETAL_CUDA_GRAPHS=serial timeout 60 $B/petal bench --backend cuda --model /tmp/q36 --contexts 256 --steps 64 > $R/petal-cuda-serial.json 2>> $R/log.txt
echo "petal serial exit $? at $SECONDS s" >> $R/log.txt
for s in 1 65; do
	PETAL_CUDA_PROFILE=1 timeout 60 $B/petal bench --backend cuda --model /tmp/q36 --contexts 256 --steps $s > /dev/null 2> $R/profile-256-$s.txt
	echo "profile $s exit $? at $SECONDS s" >> $R/log.txt
done
tar czf $OUT/r.tgz -C /tmp R
cat $R/log.txt; grep -E 'SUMMARY' $R/*.log; grep -E '^(--- FAIL|FAIL|ok|PASS)' $R/shaders.log $R/fixtures.log | head
python3 -c "
import json
for f in ['$R/petal-cuda.json','$R/petal-cuda-serial.json']:
    try: d=json.load(open(f))
    except Exception as e: print(f, e); continue
    for a in d['arms']: print(f.split('/')[-1], a['context'], a.get('error'), a['prefill']['tok_s'] if 'prefill' in a else '', a['decode']['tok_s'] if 'decode' in a else '')
"
