#!/bin/bash
# Call G (2026-12-02, third session): memcheck, synccheck and initcheck over every shaders test,
# four processes a tool side by side, of main at 389b252 (the binaries of call F, .devcarry/s3).
# Outputs: one tarball, r.tgz.
set -u
B=.devcarry/s3; R=/tmp/R; mkdir -p $R/san
for f in $B/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; done
SANITIZE_TOOLS="memcheck synccheck initcheck" SANITIZE_SECS=520 \
	bash $B/device-tests.sh $B $R/san sanitize >$R/san/out.txt 2>&1
echo "sanitize exit $? at $SECONDS s" >>$R/log.txt
tar czf $OUT/r.tgz -C /tmp R
cat $R/log.txt $R/san/sanitize.log
