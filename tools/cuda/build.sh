#!/bin/bash
# build.sh DIR: stripped, xz-compressed test binaries (CGO_ENABLED=0; dynamically linked through purego) (and petal)
# for tools/cuda/device-tests.sh and bench.sh, built here for linux/amd64.
set -eu
DIR=$1
mkdir -p "$DIR"
export CGO_ENABLED=0 GOOS=linux GOARCH=amd64
for p in shaders shaders/selftest engine/gpumodel gpu/cuda; do
	go test -c -ldflags='-s -w' -o "$DIR/$(basename $p).test" "./$p"
done
go build -ldflags='-s -w' -o "$DIR/petal" .
rm -f "$DIR"/*.xz
xz -T0 -f "$DIR"/*.test "$DIR/petal"
cp "$(dirname "$0")"/*.sh "$DIR"/
ls -la "$DIR"
