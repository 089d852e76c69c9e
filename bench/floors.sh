#!/usr/bin/env bash
# Each build stage's peak RSS, anonymous peak and memory floor at the 1.7B and 4B shapes, as a markdown table for
# docs/scale.md (the floor: the smallest memory limit at which the stage finishes within 1.5 x its unlimited time;
# see bench/floor.py). Run it as root (a memory cgroup) on a quiet machine: about an hour per shape, up to
# 25 GB of disk under WORK and 12 GB of memory at 4B.
#
#   bench/floors.sh [SHAPE ...]          # default: qwen3-1.7b qwen3-4b
#   WORK=/big/disk OUT=floors.json E2E=1 bench/floors.sh   # E2E=1 adds `dflash-bot build` as a whole
#   STEP=500000000 TRIES=5 bench/floors.sh qwen3-4b        # a coarser grid and fewer tries: about half the time
#   RECORD=1 bench/floors.sh                                 # also keep the rows in docs/ and rewrite docs/scale.md
set -euo pipefail
cd "$(dirname "$0")/.."
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=(qwen3-1.7b qwen3-4b)
out=${OUT:-floors-$(date -u +%Y%m%d-%H%M).json}
stages=(all)
[ "${E2E:-0}" = 1 ] && stages+=(build)
extra_args=()
[ -n "${WORK:-}" ] && extra_args=(--work "$WORK")
[ "${RECORD:-0}" = 1 ] && extra_args+=(--record)
echo "floors of ${shapes[*]} (stages: ${stages[*]}); rows kept in $out; load average $(cut -d' ' -f1-3 /proc/loadavg)"
exec .venv/bin/python bench/scale.py --shapes "${shapes[@]}" --stage "${stages[@]}" --floor \
    --floor-step "${STEP:-250000000}" --floor-tries "${TRIES:-8}" --limits-out "$out" "${extra_args[@]}"
