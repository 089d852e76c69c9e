#!/usr/bin/env bash
# Each build stage's peak RSS, anonymous peak and memory floor at the 1.7B and 4B shapes, as a markdown table for
# docs/scale.md (the floor: the smallest memory limit at which the stage finishes within 1.5 x its unlimited time;
# see bench/floor.py). Run it as root (a memory cgroup) on a quiet machine: about an hour per shape, up to
# 25 GB of disk under WORK and 12 GB of memory at 4B.
#
#   bench/floors.sh [SHAPE ...]          # default: qwen3-1.7b qwen3-4b
#   WORK=/big/disk OUT=floors.json E2E=1 bench/floors.sh   # E2E=1 adds `dflash-bot build` as a whole
set -euo pipefail
cd "$(dirname "$0")/.."
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=(qwen3-1.7b qwen3-4b)
out=${OUT:-floors-$(date -u +%Y%m%d-%H%M).json}
stages=(all)
[ "${E2E:-0}" = 1 ] && stages+=(build)
work_args=()
[ -n "${WORK:-}" ] && work_args=(--work "$WORK")
echo "floors of ${shapes[*]} (stages: ${stages[*]}); rows kept in $out; load average $(cut -d' ' -f1-3 /proc/loadavg)"
exec .venv/bin/python bench/scale.py --shapes "${shapes[@]}" --stage "${stages[@]}" --floor \
    --limits-out "$out" "${work_args[@]}"
