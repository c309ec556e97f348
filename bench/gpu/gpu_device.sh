#!/usr/bin/env bash
# Issue 27's GPU part on a lent GPU machine (the `device` tool), run from the repository root
# with what `python bench/gpu/gpu_kit.py` made here carried:
#
#   run(command="bash bench/gpu/gpu_device.sh tests quick", carry=[".whl", "build/gpu-kit"])
#
# Stages, run in the order given (all append to $OUT/stages.log: the device tool brings back at
# most 8 files, and the first H100 lease lost tests.log as the ninth; a failed stage does not
# stop the next, the exit status says whether any failed):
#   tests    the device and torch, then tests/trainer/test_cuda.py on the kit's shards
#   quick    bench/gpu/gpu.py for vanilla and three bias/mask presets ($OUT/gpu-quick.json)
#   bench    bench/gpu/gpu.py for every preset ($OUT/gpu.json; about 5 minutes on an H100)
#   compile  bench/gpu/gpu.py --compile for vanilla and the same three ($OUT/gpu-compile.json)
#   cudnn    bench/gpu/gpu.py for vanilla and the same three, built 8 ahead, with cuDNN's attention
#            allowed ($OUT/gpu-cudnn.json: against prefetch's loader-8 rows, which keep it off)
#   prefetch bench/gpu/gpu.py for vanilla and the same three with batches built inline and 8 ahead
#            ($OUT/gpu-prefetch.json: the x_inline column)
#   profile  bench/gpu/gpu_profile.py: where a vanilla and a dea update's time goes, batches
#            built inline and 8 ahead ($OUT/gpu-profile-0.json, gpu-profile-8.json)
# BENCH_ARGS adds arguments to every bench/gpu/gpu.py call (e.g. "--max-tokens 8192").
# Copy what comes back to results/gpu/ (the JSON names its device) and commit it.
set -u -o pipefail
KIT=build/gpu-kit
export SYNATTN_TEST_M30K=$KIT
OUT=${OUT:-build/gpu-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || { echo "gpu_device.sh: installing .whl failed"; exit 2; }
export PYTHONPATH=/tmp/site:$PWD:$PWD/shared/src:$PWD/services/trainer/src PYTHONUNBUFFERED=1
[ -f $KIT/tokenizer.json ] || { echo "gpu_device.sh: no $KIT (python bench/gpu/gpu_kit.py)"; exit 2; }
BIAS_MASK=(dea lpea slr-pure)
status=0

stage() {  # stage NAME COMMAND...: run it, its output to the terminal and $OUT/stages.log
    local name=$1
    shift
    echo "== $name: $*" | tee -a "$OUT/stages.log"
    "$@" 2>&1 | tee -a "$OUT/stages.log" || { status=1; echo "== $name FAILED" | tee -a "$OUT/stages.log"; }
}

for s in "$@"; do
    case $s in
    tests)
        stage device bash -c 'nvidia-smi; python3 -c "import torch; print(torch.__version__,
            torch.version.cuda, torch.cuda.get_device_name(), torch.cuda.is_bf16_supported())"'
        stage tests python3 -m pytest -p no:cacheprovider -q -ra \
            tests/trainer/test_cuda.py ;;
    quick)
        stage quick python3 bench/gpu/gpu.py --shards $KIT --variants vanilla "${BIAS_MASK[@]}" \
            --out "$OUT/gpu-quick.json" ${BENCH_ARGS:-} ;;
    bench)
        stage bench python3 bench/gpu/gpu.py --shards $KIT --out "$OUT/gpu.json" ${BENCH_ARGS:-} ;;
    compile)
        stage compile python3 bench/gpu/gpu.py --shards $KIT --compile --variants vanilla \
            "${BIAS_MASK[@]}" --out "$OUT/gpu-compile.json" ${BENCH_ARGS:-} ;;
    cudnn)
        stage cudnn python3 bench/gpu/gpu.py --shards $KIT --variants vanilla "${BIAS_MASK[@]}" \
            --loader-workers 8 --cudnn-attention --out "$OUT/gpu-cudnn.json" ${BENCH_ARGS:-} ;;
    prefetch)
        stage prefetch python3 bench/gpu/gpu.py --shards $KIT --variants vanilla "${BIAS_MASK[@]}" \
            --loader-workers 0 8 --out "$OUT/gpu-prefetch.json" ${BENCH_ARGS:-} ;;
    profile)
        for w in 0 8; do
            stage profile-$w python3 bench/gpu/gpu_profile.py --shards $KIT --variants vanilla dea \
                --loader-workers $w --out "$OUT/gpu-profile-$w.json"
        done ;;
    *) echo "gpu_device.sh: unknown stage $s (tests, quick, bench, compile, cudnn, prefetch, profile)"
       exit 2 ;;
    esac
done
exit $status
