#!/usr/bin/env bash
# One device call's worth of GPU work, every step's exact command logged with the commit it ran at.
# Usage (on the GPU box, repo root): OUT=/some/dir MF_COMMIT=<sha> bash bench/gpu_session.sh STEP...
# Steps (pfprof: where materialize spends its time for the judge benches' shapes; pfjudge pftol pfzoo pffuzz pfwait: issue 43's prefill judge benches, the ssm_prefill tolerance and delta_prefill bound, amplified SP-/DP- rows, clean fuzzes in the background; pfstart pfhold pfcollect: those fuzzes for PF_TIME, longer than one call, over several calls; TUNE_SECTIONS picks tune_large.py's sections; ZOO_TIME the amplified zoo's --time): info tests tune precompile reps reps100 kernel racy amp ampzoo defaultk (the default --workers-per-gpu: engine-style and update kernels) mpsmix (K=8 under MPS: a faulting zoo row beside correct kernels) updcompare (update contracts judged on the device vs the host) updbench (256-row update batches: the oracle on the device vs the host) fleetzoo (a --fleet campaign over the amplified zoo: FLEET_WORKERS processes standing in for boxes, FLEET_TIME each; needs redis-server and the redis package) rowseeds (ROWS fuzzed under SEEDS, ROW_TIME each, no database: how soon a row is found from a fresh start) conformance (each corpus kernel compiled and interpreted on the same inputs) cpzoo (the conv_prefill rows amplified, then its correct kernels fuzzed, also narrowed as vLLM's) useramp racemap timeline order small trust (the CPU interpreter tests on this box's Triton).  Results go to $OUT/w/ and, at the
# end, into one archive $OUT/gpu_results.tgz (the device tool brings few files back).
set -u
export PYTHONPATH="$PWD:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 TRITON_INTERPRET=0
OUT=${OUT:-/tmp/mambafuzz-gpu}; W="$OUT/w"; mkdir -p "$W"
COMMIT=${MF_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
MF="python3 -m mambafuzz"

run() {  # run STEP TIMEOUT COMMAND...: log the command, its start, its exit status and its seconds
  local step=$1 limit=$2; shift 2
  local t0=$(date +%s)
  echo "=== $step $(date -u +%FT%TZ) commit $COMMIT: $*" | tee -a "$W/commands.txt"
  timeout "$limit" bash -c "$*"
  local rc=$?
  echo "--- $step exit $rc after $(( $(date +%s) - t0 )) s" | tee -a "$W/commands.txt"
  tar czf "$OUT/gpu_results.tgz" -C "$W" .  # after every step: a call cut short still brings back the rest
}

for step in "$@"; do
  case $step in
    info) run info 60 "nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $W/info.txt;
          python3 -c 'import torch, triton, hypothesis, numpy, platform; print(\"python\", platform.python_version(), \"torch\", torch.__version__, \"triton\", triton.__version__, \"hypothesis\", hypothesis.__version__, \"numpy\", numpy.__version__)' >> $W/info.txt; cat $W/info.txt" ;;
    tests) run tests 330 "MAMBAFUZZ_DEVICE=cuda python3 -m pytest -m gpu -q -p no:cacheprovider tests/ > $W/gpu_tests.txt 2>&1; tail -5 $W/gpu_tests.txt" ;;
    tune) run tune 300 "python3 bench/tune_large.py --sections ${TUNE_SECTIONS:-copy,idle,ceilings,judge,together} --out $W/tune_large.md > $W/tune_large.log 2>&1; tail -60 $W/tune_large.md" ;;
    precompile) run precompile 400 "python3 bench/precompile_bench.py --out $W/precompile.md > $W/precompile.log 2>&1; cat $W/precompile.md" ;;
    reps) run reps 300 "python3 bench/gpu_bench.py --pairs 3 --out $W/gpu_bench.md > $W/gpu_bench.log 2>&1; tail -30 $W/gpu_bench.log" ;;
    reps100) run reps100 300 "python3 bench/gpu_bench.py --pairs 3 --reps-large 100 --out $W/gpu_bench_100.md > $W/gpu_bench_100.log 2>&1; tail -12 $W/gpu_bench_100.log" ;;
    kernel) run kernel 200 "python3 bench/kernel_bench.py --out $W/kernel_bench.md > $W/kernel_bench.log 2>&1; tail -5 $W/kernel_bench.log" ;;
    racy) run racy 240 "python3 bench/gpu_racy.py --reps 100 --out $W/gpu_racy.md > $W/gpu_racy.log 2>&1; tail -5 $W/gpu_racy.log" ;;
    amp) run amp 280 "python3 bench/amplify_bench.py --out $W/amplify.md > $W/amplify.log 2>&1; tail -5 $W/amplify.log" ;;
    ampzoo) run ampzoo ${ZOO_LIMIT:-$(( ${ZOO_TIME:-150} + 90 ))} "TRITON_CACHE_DIR=\$(mktemp -d) $MF zoo --device cuda --profile gpu-amp --reps 50 --isolate --time ${ZOO_TIME:-150} --json \
              --crashes-dir $W/ampzoo-crashes > $W/zoo_gpu_amp.json 2> $W/zoo_gpu_amp.err;
            python3 -c \"import json; d=json.load(open('$W/zoo_gpu_amp.json')); print(sum(t['caught'] for t in d['targets']), 'of', len(d['targets']), 'caught');
[print(t['target'], t['caught'], t['status'], (t.get('finding') or {}).get('seconds_to_first'), (t.get('finding') or {}).get('case_summary')) for t in d['targets']]\"" ;;
    useramp) run useramp 330 "python3 bench/user_amp_bench.py --device cuda --time 60 --plain-time 40 --clean-time 25 --shrink-time 30 \
              --cpu-json bench/results/user_amp_cpu.json --out $W/user_amp_h200.json --md $W/user_amp_h200.md \
              > $W/user_amp.log 2>&1; cat $W/user_amp_h200.md" ;;
    trust) run trust 300 "env -u TRITON_INTERPRET python3 -m pytest -q -p no:cacheprovider tests/unit/test_interp_compat.py tests/detection/test_style_kernels.py tests/unit/test_compile_finding.py > $W/trust_cpu.txt 2>&1; tail -3 $W/trust_cpu.txt" ;;
    small) run small 200 "python3 bench/small_reps.py --out $W/small_reps.md > $W/small_reps.log 2>&1; cat $W/small_reps.md" ;;
    order) run order 200 "python3 bench/judge_order.py --out $W/judge_order.md > $W/judge_order.log 2>&1; cat $W/judge_order.md" ;;
    timeline) run timeline 200 "python3 bench/loop_timeline.py --out $W/loop_timeline.md > $W/loop_timeline.log 2>&1; cat $W/loop_timeline.md" ;;
    racemap) run racemap 200 "$MF fuzz --target zoo.BM-NOGUARD --target zoo.SD-SPAN --device cuda --profile gpu-amp \
              --reps 50 --time 120 --json --database none --crashes-dir $W/racemap-crashes > $W/racemap.json 2> $W/racemap.err;
            echo racemap exit \$?" ;;
    split) run split 300 "python3 bench/example_split.py --seconds ${SPLIT_TIME:-15} --out $W/example_split.md --json $W/example_split.json > $W/example_split.log 2>&1; tail -12 $W/example_split.md" ;;
    perk) run perk 580 "python3 bench/workers_per_gpu.py --seconds ${PERK_TIME:-25} --ks ${PERK_KS:-1 2 4 8 12} --out $W/workers_per_gpu.md --json $W/workers_per_gpu.json > $W/workers_per_gpu.log 2>&1; tail -12 $W/workers_per_gpu.md; tail -3 $W/workers_per_gpu.log" ;;
    updzoo) run updzoo 300 "TRITON_CACHE_DIR=\$(mktemp -d) $MF zoo --device cuda --profile gpu-amp --reps 50 --isolate --workers-per-gpu 1 --time ${ZOO_TIME:-120} --json \
              --target 'zoo.SSM-*' --target 'zoo.DU-*' --crashes-dir $W/updzoo-crashes > $W/updzoo.json 2> $W/updzoo.err;
            python3 -c \"import json; d=json.load(open('$W/updzoo.json')); print(sum(t['caught'] for t in d['targets']), 'of', len(d['targets']), 'caught');
[print(t['target'], t['caught'], t['status'], (t.get('finding') or {}).get('seconds_to_first'), (t.get('finding') or {}).get('case_summary')) for t in d['targets']]\";
            $MF fuzz --device cuda --profile gpu-amp --reps 50 --time 60 --json --database none --target triton.ssm_update --target triton.delta_update --target torch.ssm_update --target torch.delta_update --crashes-dir $W/updclean-crashes > $W/updclean.json 2> $W/updclean.err;
            python3 -c \"import json; d=json.load(open('$W/updclean.json')); [print(t['target'], t['status'], t['examples']) for t in d['targets']]\"" ;;
    rowseeds) run rowseeds $(( (${ROW_TIME:-60} + 30) * $(echo ${SEEDS:-1 2 3} | wc -w) )) "for s in ${SEEDS:-1 2 3}; do timeout $(( ${ROW_TIME:-60} + 20 )) $MF fuzz --device cuda --profile gpu-amp --reps 50 --isolate --time ${ROW_TIME:-60} --seed \$s \
              $(for r in ${ROWS:-zoo.CU-I32 zoo.DU-STEPS zoo.SSM-TOKSTRIDE}; do printf -- '--target %s ' $r; done) --json --database none --crashes-dir $W/rows\$s-crashes > $W/rowseeds_seed\$s.json 2> $W/rowseeds_seed\$s.err; echo seed \$s exit \$?;
              python3 -c \"import json; d=json.load(open('$W/rowseeds_seed\$s.json')); [print(t['target'], t['status'], t['examples'], (t.get('finding') or {}).get('seconds_to_first')) for t in d['targets']]\"; done" ;;
    defaultk) run defaultk 240 "$MF fuzz --device cuda --profile gpu-amp --reps 50 --time 45 --json --database none --target 'style_kernels.batch:memmove' --target 'style_kernels.batch:forward_on_right_overlap' --contract batch_memcpy --crashes-dir $W/defaultk-crashes > $W/defaultk_style.json 2> $W/defaultk_style.err; echo style exit \$?;
            $MF fuzz --device cuda --profile gpu-amp --reps 50 --time 45 --json --database none --target triton.ssm_update --target triton.delta_update --target torch.ssm_update --target torch.delta_update --crashes-dir $W/defaultk-upd-crashes > $W/defaultk_upd.json 2> $W/defaultk_upd.err; echo update exit \$?;
            python3 -c \"import json; [print(t['target'], t['status'], t['examples'], round(t['examples'] / max(t['seconds'], 1e-9), 1), 'ex/s') for f in ('$W/defaultk_style.json', '$W/defaultk_upd.json') for t in json.load(open(f))['targets']]\"" ;;
    mpsmix) run mpsmix 200 "$MF fuzz --device cuda --profile gpu-amp --reps 50 --time ${MIX_TIME:-60} --workers-per-gpu 8 --json --database none \
              --target zoo.ADDR-I32 --target triton.state_copy --target torch.state_copy --crashes-dir $W/mpsmix-crashes > $W/mpsmix.json 2> $W/mpsmix.err; echo mpsmix exit \$?;
            grep -c 'not ready' $W/mpsmix.err; python3 -c \"import json; [print(t['target'], t['status'], t['examples']) for t in json.load(open('$W/mpsmix.json'))['targets']]\"" ;;
    conformance) run conformance 300 "python3 bench/conformance_gpu.py --out $W/conformance > $W/conformance.log 2>&1; echo conformance exit \$?; tail -45 $W/conformance.log" ;;
    updbench) run updbench 300 "python3 bench/update_judge_bench.py --device cuda --out $W/update_judge.json > $W/update_judge.log 2>&1; tail -16 $W/update_judge.log" ;;
    updcompare) run updcompare 200 "python3 bench/update_compare_bench.py --cases ${CMP_CASES:-12} --out $W/update_compare.json > $W/update_compare.log 2>&1; tail -5 $W/update_compare.log" ;;
    fleetzoo) run fleetzoo $(( ${FLEET_TIME:-300} + 240 )) "python3 bench/fleet_zoo.py --device cuda --workers ${FLEET_WORKERS:-2} --time ${FLEET_TIME:-300} \
              --workdir $W/fleet-zoo --out $W/fleet_zoo.md --json $W/fleet_zoo.json > $W/fleet_zoo.log 2>&1; echo fleetzoo exit \$?; tail -45 $W/fleet_zoo.md" ;;
    cpzoo) run cpzoo $(( ${ZOO_TIME:-120} + 240 )) "TRITON_CACHE_DIR=\$(mktemp -d) $MF zoo --device cuda --profile gpu-amp --reps 50 --time ${ZOO_TIME:-120} --seed 1 --database none --json \
              --target 'zoo.CP-*' --crashes-dir $W/cpzoo-crashes > $W/cpzoo.json 2> $W/cpzoo.err;
            python3 -c \"import json; d=json.load(open('$W/cpzoo.json')); print(sum(t['caught'] for t in d['targets']), 'of', len(d['targets']), 'caught');
[print(t['target'], t['caught'], t['status'], t['examples'], (t.get('finding') or {}).get('seconds_to_first'), (t.get('finding') or {}).get('case_summary')) for t in d['targets']]\";
            $MF fuzz --device cuda --profile gpu-amp --reps 50 --time ${CLEAN_TIME:-60} --json --database none --target triton.conv_prefill --target torch.conv_prefill \
              --crashes-dir $W/cpclean-crashes > $W/cpclean.json 2> $W/cpclean.err; echo clean exit \$?;
            $MF fuzz --device cuda --profile gpu-amp --reps 50 --time ${CLEAN_TIME:-60} --json --database none --target triton.conv_prefill --max-width 4 --conv-layout dim --block-multiple 8 \
              --crashes-dir $W/cpclean-vllm-crashes > $W/cpclean_vllm.json 2> $W/cpclean_vllm.err; echo clean-vllm exit \$?;
            python3 -c \"import json; [print(t['target'], t['status'], t['examples'], t.get('rejected')) for f in ('$W/cpclean.json', '$W/cpclean_vllm.json') for t in json.load(open(f))['targets']]\"" ;;
    pfjudge) run pfjudge 300 "for r in ${PF_REPS:-20 100}; do python3 bench/ssm_prefill_judge_bench.py --device cuda --reps \$r --out $W/ssm_prefill_judge_\$r.json > $W/ssm_prefill_judge_\$r.log 2>&1; tail -8 $W/ssm_prefill_judge_\$r.log;
            python3 bench/delta_prefill_judge_bench.py --device cuda --reps \$r --out $W/delta_prefill_judge_\$r.json > $W/delta_prefill_judge_\$r.log 2>&1; tail -8 $W/delta_prefill_judge_\$r.log; done" ;;
    pftol) run pftol 200 "timeout 90 python3 bench/ssm_prefill_tolerance.py --device cuda --out $W/ssm_prefill_tolerance.md > $W/ssm_prefill_tolerance.log 2>&1; echo tolerance exit \$?; tail -20 $W/ssm_prefill_tolerance.md;
            timeout 90 python3 bench/delta_prefill_bound.py --device cuda --out $W/delta_prefill_bound.json > $W/delta_prefill_bound.log 2>&1; echo bound exit \$?; tail -20 $W/delta_prefill_bound.log" ;;
    pfprof) run pfprof 200 "python3 bench/materialize_profile.py --device cuda --out $W/materialize_profile.json > $W/materialize_profile.log 2>&1; cat $W/materialize_profile.log" ;;
    pfzoo) run pfzoo $(( ${ZOO_TIME:-150} + 120 )) "TRITON_CACHE_DIR=\$(mktemp -d) $MF zoo --device cuda --profile gpu-amp --reps 50 --time ${ZOO_TIME:-150} --seed 1 --database none --json \
              --target 'zoo.SP-*' --target 'zoo.DP-*' --crashes-dir $W/pfzoo-crashes > $W/pfzoo.json 2> $W/pfzoo.err; echo pfzoo exit \$?;
            python3 -c \"import json; d=json.load(open('$W/pfzoo.json')); print(sum(t['caught'] for t in d['targets']), 'of', len(d['targets']), 'caught');
[print(t['target'], t['caught'], t['status'], t['examples'], (t.get('finding') or {}).get('seconds_to_first'), (t.get('finding') or {}).get('case_summary')) for t in d['targets']]\"" ;;
    pffuzz) # the prefill reference kernels fuzzed clean, PF_TIME each, in the background beside the next steps; the
            # example database under $W/pfdb (PF_DB: a folder carried from an earlier call to go on from)
            mkdir -p "$W/pfdb"; [ -n "${PF_DB:-}" ] && cp -r "$PF_DB"/. "$W/pfdb/"
            for c in ssm_prefill delta_prefill; do
              echo "=== pffuzz-$c $(date -u +%FT%TZ) commit $COMMIT: $MF fuzz --device cuda --profile gpu-amp --reps 50 --time ${PF_TIME:-300} --target triton.$c --target torch.$c --database $W/pfdb/$c --json" | tee -a "$W/commands.txt"
              ( timeout $(( ${PF_TIME:-300} + 60 )) $MF fuzz --device cuda --profile gpu-amp --reps 50 --time ${PF_TIME:-300} --target triton.$c --target torch.$c \
                  --database "$W/pfdb/$c" --json --crashes-dir "$W/pffuzz-$c-crashes" > "$W/pffuzz_$c.json" 2> "$W/pffuzz_$c.err";
                echo "--- pffuzz-$c exit $? at $(date -u +%FT%TZ)" >> "$W/commands.txt" ) &
            done ;;
    pfbound) run pfbound 120 "timeout 100 python3 bench/delta_prefill_bound.py --device cuda --out $W/delta_prefill_bound.json > $W/delta_prefill_bound.log 2>&1; echo bound exit \$?; tail -24 $W/delta_prefill_bound.log" ;;
    pfwait) wait; run pfwait 60 "python3 -c \"import json
for c in ('ssm_prefill', 'delta_prefill'):
    d = json.load(open('$W/pffuzz_' + c + '.json')); [print(t['target'], t['status'], t['examples'], round(t['seconds'], 1)) for t in d['targets']]\"; grep pffuzz $W/commands.txt" ;;
    pfstart) # the prefill reference kernels fuzzed clean PF_TIME each, longer than one device call: started in
            # sessions of their own (setsid) so they outlive this call; pfhold keeps the box busy meanwhile,
            # pfcollect waits for them and brings their files back (PF_DIR: outside $OUT, which each call empties)
            # (PF_ALLOC_CONF: their allocators give cached memory back past a tenth of the card, so that steps beside them fit)
            PFD=${PF_DIR:-/tmp/pf}; mkdir -p "$PFD"
            for t in ${PF_TARGETS:-triton.ssm_prefill torch.ssm_prefill triton.delta_prefill torch.delta_prefill}; do
              cmd="env PYTORCH_CUDA_ALLOC_CONF=${PF_ALLOC_CONF:-garbage_collection_threshold:0.1} $MF fuzz --device cuda --profile gpu-amp --reps 50 --time ${PF_TIME:-1200} --target $t --database $PFD/db-$t --json --crashes-dir $PFD/crash-$t"
              echo "=== pfstart $(date -u +%FT%TZ) commit $COMMIT: $cmd" | tee -a "$W/commands.txt" "$PFD/commands.txt"
              setsid nohup bash -c "timeout $(( ${PF_TIME:-1200} + 120 )) $cmd > $PFD/fuzz_$t.json 2> $PFD/fuzz_$t.err; echo \"--- $t exit \$? at \$(date -u +%FT%TZ)\" >> $PFD/commands.txt" > /dev/null 2>&1 < /dev/null &
            done ;;
    pfhold) [ $(( ${PF_HOLD:-500} - SECONDS )) -gt 0 ] && sleep $(( ${PF_HOLD:-500} - SECONDS ));  # until PF_HOLD s into this call
             PFD=${PF_DIR:-/tmp/pf}; cat "$PFD/commands.txt"; tail -n 3 "$PFD"/*.err; cp -r "$PFD" "$W/pf" ;;
    pfcollect) PFD=${PF_DIR:-/tmp/pf}
            for _ in $(seq 1 ${PF_WAIT:-560}); do [ "$(grep -c '^--- ' "$PFD/commands.txt")" -ge "$(grep -c '^=== ' "$PFD/commands.txt")" ] && break; sleep 1; done
            cp -r "$PFD" "$W/pf"; cat "$PFD/commands.txt"
            for f in "$PFD"/fuzz_*.json; do python3 -c "import json, sys; d=json.load(open(sys.argv[1])); [print(t['target'], t['status'], t['examples'], round(t['seconds'], 1)) for t in d['targets']]" "$f"; done ;;
    *) echo "unknown step $step" ;;
  esac
done
tar czf "$OUT/gpu_results.tgz" -C "$W" . && ls -la "$OUT"
