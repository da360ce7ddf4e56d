#!/usr/bin/env bash
# Issue 29's latency table through the real server: builds petal and
# tools/latency, starts `petal serve` on the demo model (CPU backend, a
# settings file and prefix-cache folder of its own, so the user's are not
# read or written) on a free port, waits for /health, runs tools/latency
# against it (arguments are passed on: -json, -stream-tokens, ...) and
# stops the server. PETAL_LATENCY_BACKEND picks another backend, and
# PETAL_LATENCY_SERVE_FLAGS adds serve flags (e.g. "--parallel 1": the
# server one request at a time, as before issue 29).
set -euo pipefail
cd "$(dirname "$0")/.."

work=$(mktemp -d)
server=
cleanup() {
	if [ -n "$server" ]; then kill "$server" 2>/dev/null && wait "$server" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/petal" .
go build -o "$work/latency" ./tools/latency

read -r -a serve_flags <<<"${PETAL_LATENCY_SERVE_FLAGS:-}"
# Port 0: the kernel picks a free port, which serve prints in its first line.
"$work/petal" serve --model models/demo --backend "${PETAL_LATENCY_BACKEND:-cpu}" --addr 127.0.0.1:0 \
	--settings "$work/settings.json" --prefix-cache-dir "$work/prefix" "${serve_flags[@]}" >"$work/serve.log" 2>&1 &
server=$!
url=
for _ in $(seq 1 300); do
	url=$(grep -o -m1 'http://127\.0\.0\.1:[0-9]*' "$work/serve.log" || true)
	[ -n "$url" ] && curl -sf "$url/health" >/dev/null && break
	url=
	kill -0 "$server" 2>/dev/null || { cat "$work/serve.log"; exit 1; }
	sleep 0.2
done
[ -n "$url" ] || { echo "petal serve did not answer /health within 60 s" >&2; cat "$work/serve.log" >&2; exit 1; }
grep -m1 '^serving' "$work/serve.log" >&2
"$work/latency" -url "$url" "$@"
