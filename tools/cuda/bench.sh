#!/usr/bin/env bash
# The 35B speed run of issue 19 on the device machine, in one call: it writes the synthetic
# checkpoint of the full Qwen3.6-35B-A3B shape (tools/synth35b), measures the card's copy
# bandwidth, sizes a decode step (petal bench --dry-run at that bandwidth: the roofline),
# runs petal bench --backend cuda when the carried petal has that backend, and the transformers
# peer (peer.py beside this script) on the same weights; with CHECK=1 then the peer in float32
# against Petal's CPU backend on the 2-layer real-dimension shape (their greedy tokens must agree).
# Everything lands under $OUT; a summary is printed last.
#
# Build here, then one device call. The working tree that travels is at most 64 MiB and the
# tracked files are ~33 MB, so the binaries travel compressed (this script unpacks .gz, .xz or .zst):
#   D=/work/main/.devcarry/$USER_OR_TASK; mkdir -p $D
#   CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o $D/petal .
#   CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o $D/synth35b ./tools/synth35b
#   gzip -9f $D/petal $D/synth35b
#   device run: command "BIN=.devcarry/<that folder> tools/cuda/bench.sh", carry [".devcarry/<that folder>"],
#   timeout_s 600 (add CHECK=1 for the float32 token check, ~25 s more)
# Knobs (environment): BIN (folder with static petal and synth35b), MODEL (checkpoint folder,
# written when it holds no config.json; default /tmp/q36), LAYERS (40), LAYOUT (mlx: as the hub
# serves it; pulled: as petal pull stores it, nothing copied at load), CONTEXTS (256,4096,32768),
# STEPS (64), PEER (1: run the peer), PETAL (1: run petal bench --backend cuda if it exists),
# CHECK (0; 1: the float32 token check at the end), OUT (the device tool sets it).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${BIN:-.devcarry/h19bench}
MODEL=${MODEL:-/tmp/q36}
LAYERS=${LAYERS:-40}
LAYOUT=${LAYOUT:-mlx}
CONTEXTS=${CONTEXTS:-256,4096,32768}
STEPS=${STEPS:-64}
PEER=${PEER:-1}
PETAL=${PETAL:-1}
CHECK=${CHECK:-0}
OUT=${OUT:-/tmp/bench-out}
mkdir -p "$OUT"
for b in petal synth35b; do  # carried compressed: gzip ran on the device image; xz and zstd not tried there
  if [ -f "$BIN/$b.gz" ]; then gunzip -f "$BIN/$b.gz"; fi
  if [ -f "$BIN/$b.xz" ]; then xz -df "$BIN/$b.xz"; fi
  if [ -f "$BIN/$b.zst" ]; then zstd -qdf --rm "$BIN/$b.zst"; fi
  chmod +x "$BIN/$b" 2>/dev/null
done
export PYTHONUNBUFFERED=1
LOG=$OUT/log.txt
SUM=$OUT/summary.txt
: >"$SUM"
say() { echo "$*" | tee -a "$SUM"; }
stamp() { date -u +%H:%M:%S; }

{
  echo "== $(stamp) machine"
  nvidia-smi --query-gpu=name,memory.total,memory.used,clocks.sm,clocks.mem,driver_version --format=csv
  nproc; free -g | head -2; df -h /tmp | tail -1; uname -r
} >>"$LOG" 2>&1

if [ ! -f "$MODEL/config.json" ]; then
  echo "== $(stamp) synth35b --layers $LAYERS --layout $LAYOUT" >>"$LOG"
  "$BIN/synth35b" --out "$MODEL" --layers "$LAYERS" --layout "$LAYOUT" 2>&1 | tee -a "$LOG" | tee -a "$SUM" || { say "synth35b failed"; exit 1; }
  sync
  say "written and synced at ${SECONDS} s"
fi

echo "== $(stamp) copy bandwidth" >>"$LOG"
BW=$(python3 - <<'EOF' 2>>"$LOG"
import torch
n = 4 << 30
a = torch.empty(n, dtype=torch.uint8, device="cuda"); a.random_(); b = torch.empty_like(a)
for _ in range(3): b.copy_(a)
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
s.record()
for _ in range(10): b.copy_(a)
e.record(); torch.cuda.synchronize()
print(f"{2 * n * 10 / (s.elapsed_time(e) / 1e3) / 1e9:.0f}")
EOF
)
say "device-to-device copy: ${BW:-?} GB/s (bytes read + written)"
"$BIN/petal" bench --dry-run --model "$MODEL" --context 256 ${BW:+--bandwidth "$BW"} --json >"$OUT/dryrun.json" 2>>"$LOG" \
  && say "dry run at 256: $(python3 -c "import json;d=json.load(open('$OUT/dryrun.json'))['decode_step'];print(d['weight_bytes'],'weight bytes,',d['bytes_moved'],'bytes moved per decode step;',d['rates'])")" \
  || say "dry run failed"

if [ "$PETAL" = 1 ]; then
  probe=$("$BIN/petal" bench --backend cuda --model /nonexistent 2>&1)
  if [[ "$probe" != *"unknown backend"* ]]; then
    echo "== $(stamp) petal bench --backend cuda" >>"$LOG"
    "$BIN/petal" bench --backend cuda --model "$MODEL" --contexts "$CONTEXTS" --steps "$STEPS" >"$OUT/petal-cuda.json" 2>>"$LOG" \
      || say "petal bench --backend cuda failed (see log.txt)"
  else
    say "petal bench: this petal has no cuda backend; skipped"
  fi
fi

if [ "$PEER" = 1 ]; then
  echo "== $(stamp) peer" >>"$LOG"
  python3 "$HERE/peer.py" --model "$MODEL" --contexts "$CONTEXTS" --steps "$STEPS" --out "$OUT/peer.json" >/dev/null 2>>"$LOG" \
    || say "peer failed (see log.txt)"
fi

if [ "$CHECK" = 1 ]; then
  L2=/tmp/q36-l2
  rm -rf "$L2"
  "$BIN/synth35b" --out "$L2" --layers 2 >>"$LOG" 2>&1 || say "check: synth35b --layers 2 failed"
  "$BIN/petal" bench --model "$L2" --backend cpu --contexts 16 --steps 8 >"$OUT/check-cpu.json" 2>>"$LOG" || say "check: petal cpu failed"
  python3 "$HERE/peer.py" --model "$L2" --contexts 16 --steps 8 --dtype float32 --out "$OUT/check-peer.json" >/dev/null 2>>"$LOG" || say "check: peer failed"
  python3 - "$OUT/check-cpu.json" "$OUT/check-peer.json" <<'EOF' | tee -a "$SUM"
import json, sys
try:
    a, b = (json.load(open(p))["arms"][0] for p in sys.argv[1:])
except Exception as e:
    print(f"check: no result ({e})"); sys.exit()
ta = [a["prefill"]["first_token_id"]] + a["decode"]["token_ids"]
tb = [b["prefill"]["first_token_id"]] + b["decode"]["token_ids"]
same = sum(x == y for x, y in zip(ta, tb))
print(f"check (2 layers, context 16, float32): petal cpu {ta}\n  transformers {tb}\n  {same}/{len(ta)} tokens agree"
      + ("" if ta == tb else f"; first difference at {next(i for i, (x, y) in enumerate(zip(ta, tb)) if x != y)}"))
EOF
  rm -rf "$L2"
fi

python3 - "$OUT" <<'EOF' | tee -a "$SUM"
import json, os, sys
out = sys.argv[1]
for name in ("petal-cuda.json", "peer.json"):
    p = os.path.join(out, name)
    if not os.path.exists(p) or os.path.getsize(p) == 0:
        continue
    rep = json.load(open(p))
    for a in rep.get("arms", []):
        if "error" in a:
            print(f"{rep['backend']:>12} ctx {a['context']:>6}: {a['error'][:100]}"); continue
        print(f"{rep['backend']:>12} ctx {a['context']:>6}: prefill {a['prefill']['wall_secs']:8.3f} s "
              f"{a['prefill']['tok_s']:9.1f} tok/s; decode {a['decode']['tok_s']:7.2f} tok/s "
              f"digest {a['decode']['token_digest']}")
EOF
say "total ${SECONDS} s"
