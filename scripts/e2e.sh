#!/usr/bin/env bash
# End-to-end tests of the web UI: builds petal, starts `petal serve` on the
# demo model and drives Debian's Chromium through playwright-core
# (frontend/e2e/). Screenshots land in $E2E_ARTIFACTS (default
# frontend/e2e/artifacts). Installs Chromium with apt-get when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v chromium >/dev/null 2>&1; then
	apt-get update -qq && apt-get install -y -qq chromium >/dev/null
fi
bin=$(mktemp -d)/petal
trap 'rm -rf "$(dirname "$bin")"' EXIT
go build -o "$bin" .
cd frontend
[ -d node_modules/playwright-core ] || npm ci --no-audit --no-fund
PETAL_BIN="$bin" CHROMIUM="$(command -v chromium)" npm run --silent e2e
