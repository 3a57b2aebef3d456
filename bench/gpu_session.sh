#!/usr/bin/env bash
# One device call's worth of GPU work: GPU tests, racy-variant rates, kernel benchmark, CLI on cuda
# (and, as step 'amp', the race-amplification benchmark, and as step 'reps', repetitions per second
# of plain vs device-judged runs (bench/gpu_bench.py); neither in the default steps).
# Usage (on the GPU box, repo root): OUT=/some/dir bash bench/gpu_session.sh [steps...]
set -u
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 TRITON_INTERPRET=0
OUT=${OUT:-/tmp/mambafuzz-gpu}; mkdir -p "$OUT"
steps=${*:-"info tests racy kernel cli"}
for step in $steps; do
  echo "=== $step $(date -u +%H:%M:%S)"
  case $step in
    info) nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/info.txt"
          python3 -c "import torch, triton, hypothesis; print('torch', torch.__version__, 'triton', triton.__version__, 'hypothesis', hypothesis.__version__)" | tee -a "$OUT/info.txt" ;;
    tests) MAMBAFUZZ_DEVICE=cuda timeout 300 python3 -m pytest -m gpu -q -p no:cacheprovider tests/ 2>&1 | tail -40 | tee "$OUT/gpu_tests.txt" ;;
    racy) timeout 240 python3 bench/gpu_racy.py --reps 100 --out "$OUT/gpu_racy.md" 2>&1 | tail -60 ;;
    amp) timeout 280 python3 bench/amplify_bench.py --out "$OUT/amplify.md" 2>&1 | tail -80 ;;
    reps) timeout 300 python3 bench/gpu_bench.py --out "$OUT/gpu_bench.md" 2>&1 | tail -40 ;;
    session) timeout 420 python3 bench/session_bench.py --seconds 40 --out "$OUT/session_bench.md" 2>&1 | tail -30 ;;
    ampzoo) timeout 400 python3 -m mambafuzz.cli zoo --device cuda --profile gpu-amp --reps 50 --time 300 --json \
           --target zoo.SD-SPAN --target zoo.DS-ROW --target zoo.PP-INPLACE --target zoo.BM-NOGUARD --target zoo.BM-RIGHT \
           --crashes-dir "$OUT/ampzoo-crashes" > "$OUT/ampzoo.json" 2> "$OUT/ampzoo.err"; echo "ampzoo exit $?"
         python3 -c "
import json; d=json.load(open('$OUT/ampzoo.json'))
for v in d['variants']: print(v['target'], v['caught'], v['kind'], v['seconds_to_first'], v['case'])" ;;
    kernel) timeout 180 python3 bench/kernel_bench.py --out "$OUT/kernel_bench.md" 2>&1 | tail -60 ;;
    cli) timeout 120 python3 -m mambafuzz.cli zoo --device cuda --reps 20 --time 90 --json \
           --target 'zoo.BM-*' --target zoo.TAIL-DROP --target zoo.DS-CONTIG --target zoo.TILE-GAP \
           --target zoo.PAD-CLOBBER --target zoo.NOOP-SKIP --target zoo.SD-SPAN --target zoo.DS-ROW \
           --target zoo.PP-INPLACE --crashes-dir "$OUT/zoo-crashes" > "$OUT/zoo_cuda.json" 2> "$OUT/zoo_cuda.err"
         echo "zoo exit $?"; python3 -c "
import json; d=json.load(open('$OUT/zoo_cuda.json'))
for v in d['variants']: print(v['target'], v['caught'], v['kind'], v['seconds_to_first'], v['case'])" ;;
  esac
done
