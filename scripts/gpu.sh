#!/usr/bin/env bash
# The GPU checks and figures (docs/performance.md, the results pages), for a session that is lent a GPU machine
# (the `device` tool). A session has 15 minutes of device time, the machine's start included, so
# the first call is `essentials`, prepared here beforehand:
#
#   bash scripts/gpu.sh prepare runs/<run>/best.pt   # HERE, not on the GPU: the wheels the GPU
#                                      # image lacks into .whl/, the model's weights alone into .gpu/
#   device run, carry [".whl", ".gpu"], timeout_s 560:
#   bash scripts/gpu.sh essentials "$OUT"   # 2.3 minutes on an H200: tests/test_cuda.py; decoding of AN4
#                                      # dev by .gpu/model.pt on the CPU, the GPU and the GPU as CUDA
#                                      # graphs (real-time factors, transcripts that differ);
#                                      # training throughput eager against CUDA graphs, fp32 and bf16
#
# What a 15-minute lease holds (an H200, 2026-11-27): `trained` for three seeds of `data/an4/gpu.toml`
# reached epoch 91 of 100 in its 470 s with the CUDA tests beside them (which then ran out of their
# 200 s: 40 s alone), and a second call on the warm machine finished them (`--resume`, 85 s). So
# `trained` now runs no tests beside its seeds (CUDA_TESTS=1 to have them) and trains for 500 s
# (TRAIN_SECONDS): one call with a 560 s limit, then `tests` in a second if the lease has 2 minutes.
#
# The other phases fit one 10-minute call each, for a lease with time left:
#
#   bash scripts/gpu.sh graphs "$OUT"  # the step as CUDA graphs: tests, AN4 throughput by what is
#                                      # graphed, its waits for the GPU, AN4 and the scale recipe
#                                      # trained with graphs (dev CER by epoch)
#
#   bash scripts/gpu.sh rest "$OUT"    # the second call of such a lease: CUDA tests, long-form decoding
#                                      # GPU against CPU, a tenth of the scale corpus trained (5.5 minutes)
#   bash scripts/gpu.sh tests "$OUT"   # tests/test_cuda.py alone
#   bash scripts/gpu.sh batches "$OUT" FRAMES...  # an epoch of the scale recipe per data.batch_frames,
#                                      # or per data.batch_memory share (memory=0.5)
#   bash scripts/gpu.sh check "$OUT"   # CUDA tests, training throughput fp32 vs bf16, eager vs CUDA
#                                      # graphs (with nvidia-smi utilisation), a step profiled
#   bash scripts/gpu.sh train "$OUT"   # AN4 with the defaults on the GPU (bf16), resumable
#   bash scripts/gpu.sh decode "$OUT" [CHECKPOINT]  # every decoding strategy on the GPU; the default
#                                      # decoding of dev and the long-form recordings, GPU against CPU
#   bash scripts/gpu.sh seeds "$OUT" NAME [--set ...]  # seeds 1-3 of a recipe side by side, detached
#   bash scripts/gpu.sh robustness "$OUT" NAME [--set ...]    # their robustness table (scripts/robustness.py)
#   bash scripts/gpu.sh surroundings "$OUT" NAME [--set ...]  # their surroundings table: padding, crops, single words
#   bash scripts/gpu.sh curve "$OUT"   # the 100-hour recipe's dev CER curve on a tenth of the scale
#                                      # corpus, with graphs, 8.5 minutes a call, resumed by the next
#   bash scripts/gpu.sh scale "$OUT"   # a tenth of the scale corpus, peak memory against length,
#                                      # and the 100-hour recipe training on it, detached
#
# `seeds` returns at once: its runs outlive the call while the machine stays warm (poll
# runs/NAME-s*/metrics.jsonl from the next calls). Each run has its own feature cache, so that
# three writers never share one index. Everything runs in /tmp/las-work, a snapshot of the
# working tree taken by the first phase of a lease (see below).
set -euo pipefail
weights_only() {  # PYTHON CHECKPOINT OUT [.half()]: its weights alone, without the optimizer's state (a third the size)
    "$1" -c "import sys; from las.model.checkpoint import load_checkpoint, save_checkpoint; \
c = load_checkpoint(sys.argv[1]); save_checkpoint(sys.argv[2], c.config, c.vocabulary, c.normalizer, c.build_model()${4:-}, {})" \
        "$2" "$3"
}
phase=${1:?prepare, essentials, graphs, rest, check, train, decode, trained, seeds, robustness, surroundings, curve, warmstart or scale}
if [ "$phase" = prepare ]; then
    checkpoint=${2:?a checkpoint whose weights travel to the GPU}
    # The GPU image's Python is 3.12 on x86-64; the versions are those of .venv.
    rm -rf .whl && mkdir -p .whl .gpu
    for wheel in Levenshtein==0.27.5 rapidfuzz==3.14.6 soundfile==0.14.0 cffi==2.1.1 pycparser==3.12; do
        python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
            --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
            --platform any -d .whl "$wheel"
    done
    # Weights only: the optimizer's state would double what travels (64 MiB in all).
    weights_only .venv/bin/python "$checkpoint" .gpu/model.pt
    du -sh .whl .gpu
    exit 0
fi
out=${2:-gpu-results}
mkdir -p "$out"
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site
fi
out=$(realpath "$out")
# The device tool copies the working tree afresh into the repository root at every call, so a
# run that outlives its call (train, seeds, scale) breaks when its audio is rewritten under it.
# Every phase works in a snapshot of the tree taken by the first one; later calls reuse it.
work=/tmp/las-work
if [ ! -f "$work/pyproject.toml" ]; then
    mkdir -p "$work"
    tar --exclude=./runs --exclude=./.whl --exclude=./.git -cf - . | tar -C "$work" -xf -
fi
cd "$work"
mkdir -p runs
python3 -m pip install -q --no-deps --no-build-isolation -e .
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/device.txt"
cuda_tests() {  # -v: each result on its own line, kept even if the limit stops the run
    # The exit status too: a lease once got the results without pytest's summary line (a crash
    # at the end, or a kill, cannot be told apart without it).
    local status=0
    timeout "$1" python3 -m pytest -v -p no:cacheprovider tests/test_cuda.py > "$out/cuda_tests.txt" 2>&1 || status=$?
    echo "pytest exit status: $status" >> "$out/cuda_tests.txt"
    grep -E "PASSED|FAILED|ERROR|SKIPPED|passed|failed|exit status" "$out/cuda_tests.txt" || true
}
scale_epochs() {  # one epoch of the 100-hour recipe on a tenth of the scale corpus per batch budget
    [ -f runs/scale/tenth/train.tsv ] || timeout 45 python3 scripts/scale.py build --out runs/scale/tenth \
        --train 2854 --dev 100 --workers 14 | tee -a "$out/scale.txt" || true
    nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -lms 200 > "$out/utilisation.csv" &
    local sampler=$! frames batches
    for frames in "$@"; do  # a budget of frames, or memory=SHARE: the largest budget the GPU's share holds
        batches=$([ "${frames#memory=}" = "$frames" ] && echo "data.batch_frames=$frames" \
            || echo "data.batch_$frames --set data.batch_frames=0")
        echo "$batches: $(date +%T.%N)" | tee -a "$out/scale.txt"
        timeout -s INT 100 python3 -m las train --config data/recipes/hw4p2.toml --train runs/scale/tenth/train.tsv \
            --dev runs/scale/tenth/dev.tsv --out "runs/scale-$frames" --device cuda --precision bf16 \
            --set data.workers=8 --set $batches --set train.epochs=1 --set train.warmup_steps=200 \
            2>&1 | grep -v Warning | grep -E "data.batch_memory|epoch|error" | tail -n 4 | tee -a "$out/scale.txt" || true
        cat "runs/scale-$frames/metrics.jsonl" >> "$out/scale.txt" 2>/dev/null || true
    done
    echo "done: $(date +%T.%N)" >> "$out/scale.txt"
    kill "$sampler"
}
case "$phase" in
graphs)
    # The training step as CUDA graphs, about 9.5 minutes with the start: the CUDA tests (while the
    # scale tenth is built and the graphed step's waits for the GPU are listed); AN4 throughput eager,
    # speller as graphs, speller and listener as graphs, each also at 2x batches by frames; a real
    # `las train` of AN4 at 2x batches with graphs (epoch seconds with augmentation, dev CER by epoch);
    # the scale recipe with graphs on a tenth of the scale corpus, dev CER by epoch. Alone on the GPU:
    # throughput and the two runs, one after the other.
    phase() { echo "$1: $(date +%T)" >> "$out/device.txt"; }
    phase tests
    timeout 60 python3 scripts/scale.py build --out runs/scale/tenth --train 2854 --dev 100 --workers 10 > /dev/null 2>&1 &
    building=$!
    timeout 60 python3 scripts/benchmark.py profile --no-packed --graphs 2>&1 | grep -v Warn > "$out/profile.txt" &
    profiling=$!
    cuda_tests 100
    wait "$building" "$profiling" || true
    nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -lms 200 > "$out/utilisation.csv" &
    sampler=$!
    phase throughput
    timeout 170 python3 scripts/benchmark.py throughput --device cuda --graphs --utterances 848 --repeats 1 \
        --batch-frames 8500 2>&1 | grep -v Warn | tee "$out/throughput.md" || true
    phase an4
    timeout -s INT 90 python3 -m las train --out runs/an4-graphs --device cuda --seed 1 --set data.workers=6 \
        --set data.batch_frames=8500 --set train.warmup_steps=150 --set train.specaugment_start_epoch=10 \
        --set train.augment.start_epoch=16 --set train.cuda_graphs=true 2>&1 | grep -v Warn | tail -n 3 > "$out/an4.txt" || true
    cat runs/an4-graphs/metrics.jsonl >> "$out/an4.txt" 2>/dev/null || true
    phase scale
    timeout -s INT 165 python3 -m las train --config data/recipes/hw4p2.toml --train runs/scale/tenth/train.tsv \
        --dev runs/scale/tenth/dev.tsv --out runs/scale-graphs --device cuda --precision bf16 --set data.workers=8 \
        --set data.batch_frames=128000 --set train.epochs=30 --set train.warmup_steps=200 --set train.cuda_graphs=true \
        2>&1 | grep -v Warn | tail -n 3 > "$out/scale.txt" || true
    cat runs/scale-graphs/metrics.jsonl >> "$out/scale.txt" 2>/dev/null || true
    phase done
    kill "$sampler"
    ;;
tests)
    cuda_tests 120
    ;;
batches)
    shift 2
    scale_epochs "$@"
    ;;
essentials)
    # Each part under its own limit, so that the call returns with what it has inside 9 minutes.
    cuda_tests 270
    for run in cpu cuda cuda-graphs; do
        echo "dev on $run:" | tee -a "$out/decode.txt"
        timeout 60 python3 -m las decode .gpu/model.pt data/an4/dev.tsv --device "${run%-graphs}" \
            --out "$out/dev-$run.csv" --set decode.cuda_graphs=$([ "$run" = cuda-graphs ] && echo true || echo false) \
            2>&1 | tail -n 1 | tee -a "$out/decode.txt" || true
    done
    for run in cuda cuda-graphs; do
        echo "dev on $run: $(diff "$out/dev-$run.csv" "$out/dev-cpu.csv" | grep -c '^<' || true) transcripts" \
            "differ from the CPU's" | tee -a "$out/decode.txt"
    done
    nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -lms 200 > "$out/utilisation.csv" &
    sampler=$!
    timeout 150 python3 scripts/benchmark.py throughput --device cuda --precisions fp32,bf16 --graphs \
        --utterances 848 --repeats 1 | tee "$out/throughput.md" || true
    kill "$sampler"
    ;;
rest)
    # The rest of a 15-minute lease after `essentials`, 5.5 minutes on an H200: the CUDA tests again;
    # the long-form recordings decoded on the GPU and the CPU; a tenth of the scale corpus (built
    # there, 10 h) through the 100-hour recipe, an epoch at its batch budget, at 4x it, and at the
    # budget that half the GPU's memory holds (data.batch_memory).
    cuda_tests 90
    timeout 150 bash -c '
        python3 scripts/longform.py build > /dev/null
        for run in cuda cuda-graphs cpu; do
            echo "long-form on $run:"
            python3 -m las decode .gpu/model.pt runs/longform/sets/speakers.tsv --device "${run%-graphs}" \
                --out "$0/longform-$run.csv" --set decode.cuda_graphs=$([ "$run" = cuda-graphs ] && echo true || echo false) \
                2>&1 | tail -n 1
        done
        for run in cuda cuda-graphs; do
            echo "long-form on $run: $(diff "$0/longform-$run.csv" "$0/longform-cpu.csv" | grep -c "^<") transcripts differ from the CPU'"'"'s"
        done' "$out" 2>&1 | tee "$out/decode.txt" || true
    scale_epochs 32000 128000 memory=0.5
    ;;
check)
    python3 -m pytest -q tests/test_cuda.py 2>&1 | tee "$out/cuda_tests.txt"
    # GPU utilisation every 200 ms while the variants run (eager and graphed speller, interleaved).
    nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -lms 200 > "$out/utilisation.csv" &
    sampler=$!
    python3 scripts/benchmark.py throughput --device cuda --precisions fp32,bf16 --graphs --utterances 848 \
        | tee "$out/throughput.md"
    kill "$sampler"
    for variant in --packed --no-packed "--no-packed --graphs"; do
        python3 scripts/benchmark.py profile $variant
    done | tee "$out/profile.txt"
    ;;
train)
    resume=$([ -f runs/gpu/last.pt ] && echo --resume || true)
    timeout -s INT 540 python3 -m las train --out runs/gpu --device cuda --precision bf16 $resume 2>&1 \
        | tee -a "$out/train.log" || true  # Ctrl-C at the limit saves; the next call (same warm machine) resumes
    python3 scripts/benchmark.py curve runs/gpu | tee "$out/curve.md"
    ;;
decode)
    model=${3:-runs/gpu/best.pt}
    python3 scripts/benchmark.py strategies "$model" data/an4/dev.tsv --device cuda \
        | tee "$out/strategies.md"
    # The default decoding (beam 8 + CTC) of AN4 dev and of the long-form recordings (30-55 s,
    # cut at pauses as by default) through `las decode`, on the GPU (eager, and with each step a
    # CUDA graph) and on the CPU: the real-time factors (each command's last line) and how many
    # transcripts differ from the CPU's.
    [ -f runs/longform/sets/speakers.tsv ] || python3 scripts/longform.py build > /dev/null
    for manifest in data/an4/dev.tsv runs/longform/sets/speakers.tsv; do
        name=$(basename "$manifest" .tsv)
        for run in cuda cuda-graphs cpu; do
            echo "$name on $run:" | tee -a "$out/decode.txt"
            python3 -m las decode "$model" "$manifest" --device "${run%-graphs}" --out "$out/$name-$run.csv" \
                --set decode.cuda_graphs=$([ "$run" = cuda-graphs ] && echo true || echo false) \
                2>&1 | tail -n 1 | tee -a "$out/decode.txt"
        done
        for run in cuda cuda-graphs; do
            echo "$name on $run: $(diff "$out/$name-$run.csv" "$out/$name-cpu.csv" | grep -c '^<' || true) transcripts" \
                "differ from the CPU's" | tee -a "$out/decode.txt"
        done
    done
    ;;
trained)
    # Three seeds of a recipe (and with CUDA_TESTS=1 the CUDA tests beside them) trained to the end
    # within the call (`data/an4/gpu.toml`: about 7.5 minutes on an H200, 4 loader workers each), the
    # GPU sampled every 500 ms; each seed's log and metrics into seeds.txt and its averaged weights
    # (best.pt's where the limit stopped it) back as NAME-sN.pt, for the measurements that need no
    # GPU (robustness.py, longform.py, here).
    name=${3:?run name}
    shift 3
    nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -lms 500 > "$out/utilisation.csv" &
    sampler=$!
    # FIRST_ALONE=1: seed 1 alone on the GPU first, its epochs one run's (#28's epoch time), with
    # 8 loader workers; then seeds 2 and 3 side by side in what is left of TRAIN_SECONDS.
    runs=() started=$SECONDS
    for seed in 1 2 3; do
        alone=$([ "${FIRST_ALONE:-0}" = 1 ] && [ "$seed" = 1 ] && echo 1 || echo 0)
        timeout -s INT $((${TRAIN_SECONDS:-500} - (SECONDS - started))) python3 -m las --threads 2 train \
            --out "runs/$name-s$seed" --device cuda --seed "$seed" --set data.cache_dir="runs/cache-$name-s$seed" \
            --set data.workers=$([ "$alone" = 1 ] && echo 8 || echo 4) "$@" > "runs/$name-s$seed.log" 2>&1 &
        runs+=($!)
        if [ "$alone" = 1 ]; then  # wall-clock too: an epoch's "seconds" leave out its checkpoint writes
            wait "$!" || true
            echo "seed 1 alone: $((SECONDS - started)) s wall-clock, start-up included" >> "$out/seeds.txt"
        fi
    done
    [ "${CUDA_TESTS:-0}" = 0 ] || cuda_tests 200
    wait "${runs[@]}" || true
    kill "$sampler"
    for seed in 1 2 3; do
        run=runs/$name-s$seed
        { echo "== seed $seed"; grep -v Warn "$run.log" | tail -n 4; cat "$run/metrics.jsonl" "$run/averaged.json"; } \
            >> "$out/seeds.txt" 2>&1 || true
        weights=$([ -f "$run/averaged.pt" ] && echo "$run/averaged.pt" || echo "$run/best.pt")
        weights_only python3 "$weights" "$out/$name-s$seed.pt" || true
    done
    ;;
seeds)
    name=${3:?run name}
    shift 3
    for seed in 1 2 3; do
        setsid nohup python3 -m las --threads 2 train --out "runs/$name-s$seed" --device cuda --seed "$seed" \
            --set data.cache_dir="runs/cache-$name-s$seed" "$@" > "runs/$name-s$seed.log" 2>&1 < /dev/null &
    done
    ;;
curve)
    # The dev CER curve of the 100-hour recipe on a tenth of the scale corpus, with graphs and
    # 128,000-frame batches (about 14 s an epoch on an H200 after the first): as many epochs as
    # CURVE_SECONDS hold; a next call on the same warm machine resumes it. CURVE_SET: more
    # settings ("--set data.shortest_first_epochs=3"); CURVE_RUN: the run's name under runs/.
    [ -f runs/scale/tenth/train.tsv ] || timeout 60 python3 scripts/scale.py build --out runs/scale/tenth \
        --train 2854 --dev 100 --workers 14 > /dev/null
    run=runs/${CURVE_RUN:-scale-curve}  # its own run per starting point: a resume never crosses them
    resume=$([ -f "$run/last.pt" ] && echo --resume || true)
    nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -lms 500 > "$out/utilisation.csv" &
    sampler=$!
    timeout -s INT "${CURVE_SECONDS:-480}" python3 -m las train --config data/recipes/hw4p2.toml --train runs/scale/tenth/train.tsv \
        --dev runs/scale/tenth/dev.tsv --out "$run" --device cuda --precision bf16 --set data.workers=12 \
        --set data.batch_frames=128000 --set train.warmup_steps=200 --set train.cuda_graphs=true ${CURVE_SET:-} $resume 2>&1 \
        | grep -v Warn | tail -n 5 > "$out/curve.txt" || true
    kill "$sampler"
    cat "$run/metrics.jsonl" >> "$out/curve.txt" 2>/dev/null || true
    # The best epoch's weights in half precision (8.2M parameters: 16 MB, what a file back may
    # hold), for the long-form holdout decoded on the CPU.
    weights_only python3 "$run/best.pt" "$out/scale-model.pt" ".half()" || true
    ;;
warmstart)
    # The 100-hour recipe's model warm-started on short utterances (on the CPU, a model begun on
    # AN4 read 13 s utterances at once, where one begun from scratch had not aligned in 1,035
    # steps; docs/archive/experiments.md): its widths trained on AN4 first (`data/an4/gpu.toml`, graphs, 40
    # epochs, about 2.5 minutes), then `curve` from those weights (`--init`), about 5 minutes.
    [ -f runs/scale/tenth/train.tsv ] || timeout 60 python3 scripts/scale.py build --out runs/scale/tenth \
        --train 2854 --dev 100 --workers 4 > /dev/null &
    building=$!
    # Once a lease: a second call goes on to the curve from the weights the first one left.
    [ -f runs/an4-wide/best.pt ] || timeout -s INT 210 python3 -m las train --config data/an4/gpu.toml \
        --out runs/an4-wide --device cuda --epochs 40 --set model.listener_hidden=256 --set model.speller_hidden=512 \
        --set model.embedding_dim=256 --set data.workers=6 2>&1 | grep -v Warn | tail -n 3 > "$out/an4-wide.txt" || true
    cat runs/an4-wide/metrics.jsonl >> "$out/an4-wide.txt" 2>/dev/null || true
    wait "$building" || true
    CURVE_RUN=scale-warm CURVE_SET="--init runs/an4-wide/best.pt" CURVE_SECONDS=${CURVE_SECONDS:-270} \
        bash "$0" curve "$out"
    ;;
scale)
    [ -f runs/scale/tenth/train.tsv ] || python3 scripts/scale.py build --out runs/scale/tenth --train 2854 \
        | tee "$out/scale-build.txt"
    python3 scripts/scale.py memory runs/gpu/best.pt --manifest runs/scale/tenth/dev.tsv --device cuda \
        | tee "$out/memory.md"
    resume=$([ -f runs/hw4p2/last.pt ] && echo --resume || true)
    setsid nohup python3 -m las train --config data/recipes/hw4p2.toml --train runs/scale/tenth/train.tsv \
        --dev runs/scale/tenth/dev.tsv --out runs/hw4p2 --device cuda --precision bf16 --set train.warmup_steps=200 \
        $resume > runs/hw4p2.log 2>&1 < /dev/null &
    ;;
robustness)
    name=${3:?run name}; extra=("${@:4}")  # e.g. --set decode.speed=1
    tag=$(printf '%s' "${extra[*]:-}" | tr -c 'A-Za-z0-9.' '-')
    [ -f runs/robustness/sets/telephone.tsv ] || python3 scripts/robustness.py build > "$out/build.txt"
    python3 scripts/robustness.py measure --device cuda runs/"$name"-s{1,2,3}/averaged.pt "${extra[@]}" \
        | tee "$out/$name${tag:+-$tag}.md"
    ;;
surroundings)
    name=${3:?run name}; extra=("${@:4}")
    tag=$(printf '%s' "${extra[*]:-}" | tr -c 'A-Za-z0-9.' '-')
    [ -f runs/robustness/surroundings/words.tsv ] \
        || python3 scripts/robustness.py build-surroundings runs/"$name"-s1/averaged.pt > "$out/build-surroundings.txt"
    python3 scripts/robustness.py surroundings --device cuda runs/"$name"-s{1,2,3}/averaged.pt "${extra[@]}" \
        | tee "$out/$name-surroundings${tag:+-$tag}.md"
    ;;
esac
