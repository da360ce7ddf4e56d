#!/usr/bin/env bash
# Builds Petal.app for Apple silicon into build/bin (or --out DIR). Run it on
# a Mac with Go and the Xcode command-line tools: it builds the desktop app
# (Wails needs cgo and AppKit, so only a Mac can), assembles the bundle with
# build/macapp (Info.plist from build/darwin/Info.plist and wails.json, the
# icon from build/appicon.png) and signs it ad hoc, which Apple silicon
# needs to start it.
#
# With Apple's Metal compiler at hand (xcrun metal, part of Xcode), it also
# compiles each kernel source, as the driver is given it, into
# Contents/Resources/metallib with the sha256 of that source, which the
# driver loads instead of compiling at launch when the hash matches
# (gpu/metal/library.go); without it the step is skipped and the app
# compiles its kernels from source, as it always could.
#
# --exe FILE bundles FILE, a darwin/arm64 build, instead of building one.
# Off a Mac only that works, and the bundle stays unsigned (codesign is
# Apple's): the Go tests in build/macapp run it that way around a stand-in.
set -euo pipefail
cd "$(dirname "$0")/.."

exe='' out=build/bin
while [ $# -gt 0 ]; do
	case $1 in
	--exe) exe=${2:?--exe needs a file}; shift 2 ;;
	--out) out=${2:?--out needs a folder}; shift 2 ;;
	*) echo "usage: $0 [--exe FILE] [--out DIR]" >&2; exit 2 ;;
	esac
done
mac=false
[ "$(uname -s)" = Darwin ] && mac=true

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -z "$exe" ]; then
	if ! $mac; then
		echo "macapp: building petal for macOS needs a Mac (Wails uses cgo and AppKit); pass --exe FILE to bundle a darwin/arm64 build" >&2
		exit 2
	fi
	if ! xcrun --find clang >/dev/null 2>&1; then
		echo "macapp: building needs the Xcode command-line tools: run xcode-select --install" >&2
		exit 2
	fi
	exe=$work/petal
	# Wails' dialogs use UTType, whose framework its cgo flags do not link
	# (the Wails CLI adds it the same way).
	CGO_LDFLAGS="${CGO_LDFLAGS:+$CGO_LDFLAGS }-framework UniformTypeIdentifiers" CGO_ENABLED=1 GOOS=darwin GOARCH=arm64 \
		go build -tags desktop,production -trimpath -o "$exe" .
fi
app=$(go run ./build/macapp -exe "$exe" -out "$out")

# The kernel libraries: MSL 3.1 with fast math off, as the driver compiles
# (gpu/metal/compile.go), for the oldest macOS the app runs on. The link
# goes through metal too, given the same deployment target: the metallib
# tool alone stamps the library with the SDK's macOS, newer than 14.
# xcrun finds metal even where it cannot run it (from Xcode 26 the Metal
# Toolchain is a separate download), so a one-line kernel is compiled
# first: a compiler that cannot run skips the step, as none at all does,
# while a kernel of Petal's that fails to compile fails the build.
metal_flags=(-std=metal3.1 -fno-fast-math -mmacosx-version-min=14.0)
probe=$work/probe
mkdir -p "$probe"
printf 'kernel void probe() {}\n' >"$probe/probe.metal"
if ! xcrun -sdk macosx --find metal >/dev/null 2>&1; then
	echo "macapp: no Metal compiler here (xcrun metal comes with Xcode), so no kernel libraries are bundled: the app compiles its kernels from source at launch"
elif ! xcrun -sdk macosx metal "${metal_flags[@]}" -c "$probe/probe.metal" -o "$probe/probe.air" >"$probe/log" 2>&1; then
	echo "macapp: Apple's Metal compiler does not run here ($(head -n 1 "$probe/log"); xcodebuild -downloadComponent MetalToolchain installs it), so no kernel libraries are bundled: the app compiles its kernels from source at launch"
else
	src=$work/metal lib=$app/Contents/Resources/metallib
	go run ./gpu/metal/metalsrc -out "$src"
	mkdir -p "$lib"
	n=0
	for f in "$src"/*.metal; do
		name=$(basename "$f" .metal)
		xcrun -sdk macosx metal "${metal_flags[@]}" -c "$f" -o "$src/$name.air"
		xcrun -sdk macosx metal -mmacosx-version-min=14.0 "$src/$name.air" -o "$lib/$name.metallib"
		cp "$f.sha256" "$lib/"
		n=$((n + 1))
	done
	echo "macapp: compiled $n kernel libraries into $lib"
fi

if $mac; then
	codesign --force --deep --sign - "$app"
	codesign --verify --strict "$app"
	echo "macapp: built and signed ad hoc: $app"
else
	echo "macapp: not on macOS, so not signed: $app"
fi
