#!/bin/bash
# Call C (2026-12-02, second session): kernel times back to back. The synthetic 35B checkpoint,
# two profiled petal runs at 256 (1 and 65 decode steps, graphs as chains with an event node
# after each kernel), the shaders' dispatch benchmarks with and without graphs (alone on the
# card), and nsys where it exists. All outputs in one tarball.
set -u
B=.devcarry/s2c; R=/tmp/R; mkdir -p $R
export PETAL_CUDA_CACHE=/tmp/pcc LD_LIBRARY_PATH=/usr/local/cuda/lib64 PATH=$PATH:/usr/local/cuda/bin PETAL_GPU=cuda
for b in petal synth35b; do gunzip -f $B/$b.gz; chmod +x $B/$b; done
xz -dk $B/shaders.test.xz; chmod +x $B/shaders.test
$B/synth35b --out /tmp/q36 --layers 40 > $R/synth.txt 2>&1; sync
echo "synth at $SECONDS s" >> $R/log.txt
for s in 1 65; do
	PETAL_CUDA_PROFILE=1 timeout 60 $B/petal bench --backend cuda --model /tmp/q36 --contexts 256 --steps $s > $R/bench-$s.json 2> $R/profile-256-$s.txt
	echo "profile $s exit $? at $SECONDS s" >> $R/log.txt
done
for g in levels off; do
	(cd shaders && PETAL_CUDA_GRAPHS=$g timeout 60 ../$B/shaders.test -test.run '^$' -test.bench 'DispatchOverhead|QMV' -test.benchtime 200x) > $R/bench-shaders-$g.txt 2>&1
	echo "shaders bench $g exit $? at $SECONDS s" >> $R/log.txt
done
timeout 60 $B/petal bench --backend cuda --model /tmp/q36 --contexts 256 --steps 64 > $R/bench-again.json 2>> $R/log.txt
echo "petal again exit $? at $SECONDS s" >> $R/log.txt
if command -v nsys >/dev/null; then
	timeout 90 nsys profile -o $R/nsys --trace=cuda --force-overwrite true $B/petal bench --backend cuda --model /tmp/q36 --contexts 256 --steps 16 > $R/nsys.txt 2>&1
	timeout 60 nsys stats --report cuda_gpu_kern_sum --format csv $R/nsys.nsys-rep >> $R/nsys.txt 2>&1
	echo "nsys exit $? at $SECONDS s" >> $R/log.txt
	rm -f $R/*.nsys-rep $R/*.sqlite
else
	echo "no nsys" >> $R/log.txt
fi
tar czf $OUT/r.tgz -C /tmp R
cat $R/log.txt; tail -3 $R/profile-256-65.txt
