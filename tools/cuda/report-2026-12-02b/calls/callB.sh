#!/bin/bash
# Call B (2026-12-02, second session): the 35B speed run with graphs. bench.sh at 256 and
# 4096 (synthetic checkpoint, copy bandwidth, dry run, petal, transformers peer), then petal
# at 256 without graphs, two profiled runs at 256 (1 and 65 decode steps: their difference is
# 64 decode steps, kernel by kernel, back to back), 32768 bounded, the peer at 32768, and
# Nsight Compute over decode kernels in what time is left.
set -u
B=.devcarry/s2b
X=$OUT/extra.log
export PETAL_CUDA_CACHE=/tmp/pcc LD_LIBRARY_PATH=/usr/local/cuda/lib64 PYTHONUNBUFFERED=1 PATH=$PATH:/usr/local/cuda/bin
BIN=$B CONTEXTS=256,4096 timeout 300 bash tools/cuda/bench.sh > /dev/null 2>&1
echo "bench.sh 256,4096 exit $? at $SECONDS s" >> $X
PETAL_CUDA_GRAPHS=off timeout 60 $B/petal bench --backend cuda --model /tmp/q36 --contexts 256 --steps 64 > $OUT/petal-cuda-nographs.json 2>> $X
echo "== nographs exit $? at $SECONDS s" >> $X
for s in 1 65; do
	PETAL_CUDA_PROFILE=1 timeout 60 $B/petal bench --backend cuda --model /tmp/q36 --contexts 256 --steps $s > /dev/null 2> $OUT/profile-256-$s.txt
	echo "== profile steps $s exit $? at $SECONDS s" >> $X
done
S=$(( 470 - SECONDS )); [ $S -gt 230 ] && S=230
timeout $S $B/petal bench --backend cuda --model /tmp/q36 --contexts 32768 --steps 64 > $OUT/petal-cuda-32768.json 2>> $X
echo "== petal 32768 exit $? (bound $S s) at $SECONDS s" >> $X
S=$(( 540 - SECONDS )); [ $S -gt 80 ] && S=80
[ $S -gt 20 ] && timeout $S python3 tools/cuda/peer.py --model /tmp/q36 --contexts 32768 --steps 64 --out $OUT/peer-32768.json > /dev/null 2>> $X
echo "== peer 32768 exit $? at $SECONDS s" >> $X
S=$(( 575 - SECONDS ))
if [ $S -gt 25 ] && command -v ncu >/dev/null; then
	timeout $S ncu --target-processes all --graph-profiling node --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
		-k regex:'qmv|attn_decode|delta_step|moe_down|argmax|sample|add_rmsnorm|embed' --launch-count 1000 --csv \
		$B/petal bench --backend cuda --model /tmp/q36 --contexts 16 --steps 2 > $OUT/ncu.csv 2>> $X
	echo "== ncu exit $? at $SECONDS s" >> $X
fi
echo "all done at $SECONDS s" >> $X
cat $OUT/summary.txt $X
