#!/usr/bin/env bash
# The project's test command (README.md). Installs nothing beyond Go and a C++
# compiler, which it checks for, so it runs on a fresh Debian machine.
set -euo pipefail
cd "$(dirname "$0")/.."

need() { command -v "$1" >/dev/null 2>&1; }
if ! need g++ && need apt-get; then
	apt-get update -qq && apt-get install -y -qq g++ >/dev/null
fi

echo "== gofmt"
bad=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$bad" ]; then echo "gofmt would change:"; echo "$bad"; exit 1; fi

echo "== go vet"
go vet ./...

echo "== staticcheck"
go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

echo "== actionlint (.github/workflows)"
# It runs shellcheck over the workflows' run: scripts only where shellcheck
# is installed (apt-get install shellcheck); the rest is checked either way.
if ! need shellcheck; then echo "shellcheck not installed: run: scripts not shellchecked"; fi
go run github.com/rhysd/actionlint/cmd/actionlint@v1.7.12

echo "== darwin/arm64 build and vet (CGO_ENABLED=0)"
# Every package except the Wails desktop entry (the root package) must build
# for the Mac without cgo.
pkgs=$(go list ./... | grep -v '^petal$' || true)
GOOS=darwin GOARCH=arm64 CGO_ENABLED=0 go build $pkgs
GOOS=darwin GOARCH=arm64 CGO_ENABLED=0 go vet $pkgs

echo "== frontend (npm ci, svelte-check, vitest, build; the committed dist/ must match)"
# The Go build embeds frontend/dist, which is committed so that a clone
# builds without Node; this rebuilds it and fails when the copy is stale.
(cd frontend && npm ci --no-audit --no-fund --loglevel=error && npm run --silent check && npm test --silent && npm run --silent build >/dev/null)
stale=$(git status --porcelain -- frontend/dist)
if [ -n "$stale" ]; then echo "frontend/dist is stale; run npm run build in frontend/ and commit:"; echo "$stale"; exit 1; fi

echo "== go test (the full set: without -short, the whole-model runs on the sim too)"
go test -count=1 -timeout 60m ./...

echo "== petal doctor on the sim (every kernel compiled and tested, the demo model against the CPU)"
go run . doctor --backend sim >/dev/null

echo "== web UI end to end (petal serve on the demo model, Chromium)"
./scripts/e2e.sh

echo "== desktop app for Linux (Wails, webkit2gtk 4.1) under Xvfb"
./scripts/desktop.sh
