#!/bin/bash
# Call E (2026-12-02, second session): racecheck of the two sampler-distribution subtests alone
# (graphs by levels, then without graphs if that fails), and the 35B decode bench at 256 with the
# qmv kernels as they were (9229e9c reverted).
set -u
B=.devcarry/s2e; R=/tmp/R; mkdir -p $R
export PETAL_CUDA_CACHE=/tmp/pcc LD_LIBRARY_PATH=/usr/local/cuda/lib64 PATH=$PATH:/usr/local/cuda/bin PETAL_GPU=cuda
for b in petal synth35b; do gunzip -f $B/$b.gz; chmod +x $B/$b; done
xz -dk $B/shaders.test.xz; chmod +x $B/shaders.test
for g in levels off; do
	(cd shaders && PETAL_CUDA_GRAPHS=$g timeout 120 compute-sanitizer --tool racecheck --print-limit 20 --error-exitcode 9 ../$B/shaders.test -test.v -test.count=1 \
		-test.run '^TestSampleDistributions$/^n=(12|160)$/^(T=1|top_p=0.9)$') > $R/racecheck-sampledist-$g.log 2>&1
	rc=$?; echo "racecheck sampledist graphs=$g exit $rc at $SECONDS s" >> $R/log.txt
	[ $rc = 0 ] && break
done
$B/synth35b --out /tmp/q36 --layers 40 > $R/synth.txt 2>&1; sync
timeout 60 $B/petal bench --backend cuda --model /tmp/q36 --contexts 256 --steps 64 > $R/petal-cuda.json 2>> $R/log.txt
echo "petal 256 exit $? at $SECONDS s" >> $R/log.txt
tar czf $OUT/r.tgz -C /tmp R
cat $R/log.txt; tail -5 $R/racecheck-sampledist-*.log
python3 -c "
import json
d=json.load(open('$R/petal-cuda.json'))
for a in d['arms']: print(a['context'], a.get('error'), a['prefill']['tok_s'], a['decode']['tok_s'])
"
