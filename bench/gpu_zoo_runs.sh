#!/usr/bin/env bash
# Issue 44 on the H200: every zoo row's time to first failure, then the amplified zoo run five times, then the
# GPU smoke. Each step's exact command is logged with the commit it ran at; results go straight under $OUT
# (small JSON and markdown files, which the device tool brings back) and into $OUT/zoo_runs.tgz.
#
# Issue 44's five runs (the rows dealt to K workers a GPU, K from its memory). Five runs of --time 150 are 12.5
# minutes of fuzzing, past one device call's 10: start them in the background in one call and collect in later
# ones on the same warm machine (bg runs the steps detached, writing to $BG, /tmp/mf-zoo-bg; collect copies $BG
# to $OUT and says which steps have ended):
#   OUT=$OUT bash bench/gpu_zoo_runs.sh bg info zoo1 zoo2 zoo3 zoo4 zoo5 ttfsum    # returns at once
#   OUT=$OUT bash bench/gpu_zoo_runs.sh collect                                    # any time; again after ~15 min
# or in two calls in the foreground: `info zoo1 zoo2 zoo3`, then `zoo4 zoo5 ttfsum` (each under 10 minutes).
# ttfsum writes $OUT/zoo_ttf_runs.json from every zoo run's JSON under $OUT: per run the rows caught, the median
# and worst time to first failure over the rows caught, the rows not caught and why; the five runs' median of
# medians and worst of worsts. Other steps: ttf (every row's time to first failure, 5 seeds: ~6 min), smoke.
# Knobs: TTF_SEEDS (1 2 3 4 5), TTF_CAP (20 s a job), TTF_TIME (300: no job starts later), TTF_WORKERS (8),
# ZOO_TIME (150), ZOO_K (auto: the dealt zoo, K from the GPU memory; 1 for the one-worker zoo, the zoo default).
set -u
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 TRITON_INTERPRET=0
OUT=${OUT:-/tmp/mambafuzz-gpu}; mkdir -p "$OUT"
COMMIT=${MF_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
MF="python3 -m mambafuzz"

run() {  # run STEP TIMEOUT COMMAND...: log the command, its start, its exit status and its seconds
  local step=$1 limit=$2; shift 2
  local t0=$(date +%s)
  echo "=== $step $(date -u +%FT%TZ) commit $COMMIT: $*" | tee -a "$OUT/commands.txt"
  timeout -k 15 "$limit" bash -c "$*"
  local rc=$?
  echo "--- $step exit $rc after $(( $(date +%s) - t0 )) s" | tee -a "$OUT/commands.txt"
}

summary() {  # summary FILE: caught count, then per row: caught, status, seconds to first failure, examples
  python3 - "$1" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
rows = d["targets"]
print(sum(bool(t.get("caught")) for t in rows), "of", len(rows), "caught; exit", d["exit_code"])
for t in rows:
    f = t.get("finding") or {}
    if not t.get("caught"):
        print("  ESCAPED" if t["status"] != "inconclusive" else "  not checked", t["target"], t["status"],
              t["examples"], "examples", (f.get("verdict") or {}).get("kind"), t.get("why") or "")
slow = sorted((t for t in rows if t.get("finding")), key=lambda t: -t["finding"]["seconds_to_first"])[:8]
print("  slowest:", ", ".join(f"{t['target']} {t['finding']['seconds_to_first']:.1f}s" for t in slow))
EOF
}

zoo_run() {  # zoo_run SEED
  local s=$1 k=${ZOO_K:-auto} t=${ZOO_TIME:-150}
  run "zoo$s" $(( t + 45 )) "TRITON_CACHE_DIR=\$(mktemp -d) timeout -s INT -k 15 $(( t + 35 )) $MF zoo --device cuda \
      --profile gpu-amp --time $t --seed $s --workers-per-gpu $k --database none --json \
      --crashes-dir /tmp/zoo$s-crashes > $OUT/zoo_gpu_amp${t}_seed$s.json 2> $OUT/zoo_gpu_amp${t}_seed$s.err"
  summary "$OUT/zoo_gpu_amp${t}_seed$s.json" | tee "$OUT/zoo_gpu_amp${t}_seed$s.txt"
}

BG=${BG:-/tmp/mf-zoo-bg}
if [ "${1:-}" = bg ]; then  # the steps after it, detached: they outlive this call on a warm machine
  shift; mkdir -p "$BG"
  OUT="$BG" setsid nohup bash "$0" "$@" > "$BG/bg.log" 2>&1 < /dev/null &
  echo "started in the background (pid $!): $*; OUT=$OUT bash $0 collect copies $BG here"; exit 0
fi
if [ "${1:-}" = collect ]; then
  cp -r "$BG"/. "$OUT"/ 2>/dev/null; grep -h "^=== \|^--- " "$BG/commands.txt" 2>/dev/null
  tail -3 "$BG/bg.log" 2>/dev/null; ls -la "$OUT"; exit 0
fi

for step in "$@"; do
  case $step in
    info) run info 60 "nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $OUT/info.txt;
          python3 -c 'import torch, triton, hypothesis, numpy, platform, os; print(\"python\", platform.python_version(), \"torch\", torch.__version__, \"triton\", triton.__version__, \"hypothesis\", hypothesis.__version__, \"numpy\", numpy.__version__, \"cores\", len(os.sched_getaffinity(0)))' >> $OUT/info.txt;
          which nvidia-cuda-mps-control >> $OUT/info.txt; cat $OUT/info.txt" ;;
    ttf) run ttf $(( ${TTF_TIME:-300} + ${TTF_CAP:-20} + 60 )) "TRITON_CACHE_DIR=\$(mktemp -d) python3 bench/zoo_ttf.py --device cuda --profile gpu-amp \
          --seeds ${TTF_SEEDS:-1 2 3 4 5} --cap ${TTF_CAP:-20} --workers ${TTF_WORKERS:-8} --time ${TTF_TIME:-300} \
          --out $OUT/zoo_ttf_h200.md --json $OUT/zoo_ttf_h200.json --log $OUT/zoo_ttf_h200.log > $OUT/zoo_ttf_h200.out 2>&1;
          echo ttf exit \$?; cat $OUT/zoo_ttf_h200.md" ;;
    zoo[0-9]*) zoo_run "${step#zoo}" ;;
    ttfsum) python3 bench/zoo_runs_summary.py "$OUT" --commit "$COMMIT" --time "${ZOO_TIME:-150}" \
          --json "$OUT/zoo_ttf_runs.json" | tee "$OUT/zoo_ttf_runs.txt" ;;
    smoke) run smoke 240 "TRITON_CACHE_DIR=\$(mktemp -d) $MF smoke --device cuda --database none --json \
          --crashes-dir /tmp/smoke-crashes > $OUT/smoke_cuda.json 2> $OUT/smoke_cuda.err; echo smoke exit \$?;
          python3 -c \"import json; d=json.load(open('$OUT/smoke_cuda.json')); print('exit', d['exit_code']);
[print(' ', t['target'], t['status'], t['examples'], 'examples', round(t['seconds'], 1), 's', t.get('why') or '') for t in d['targets']]\"" ;;
    *) echo "unknown step $step" ;;
  esac
done
tar czf "$OUT/zoo_runs.tgz" -C "$OUT" --exclude zoo_runs.tgz . 2>/dev/null; ls -la "$OUT"
