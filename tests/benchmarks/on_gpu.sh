#!/usr/bin/env bash
# Every GPU check of the course in one run, on a machine whose python3 has torch with CUDA and the course's
# requirements: the recording that ships with the course, the CUDA-marked tests and the GPU benchmark.
#   bash tests/benchmarks/on_gpu.sh OUT_DIR      (from the repository root)
# Each part has a time limit of its own, so one that hangs cannot take the others' results with it.
set -u
out=${1:?usage: bash tests/benchmarks/on_gpu.sh OUT_DIR}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv | tee "$out/gpu.txt"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee -a "$out/gpu.txt"

timeout 240 python3 -m dpcourse.recording --out "$out/gpu.json" 2>&1 | tee "$out/recording.log"

# -o addopts="": without nbval's options (the notebooks are not run here); -m cuda: the GPU tests only.
tests=(tests/test_cuda.py tests/test_devices.py tests/test_memory.py tests/test_collectives.py tests/test_ddp_practice.py
       tests/test_recording.py)
timeout 240 python3 -m pytest -p no:cacheprovider -o addopts="" -m cuda -rs -v "${tests[@]}" \
    --junitxml="$out/cuda_tests.xml" 2>&1 | tee "$out/cuda_tests.log"

timeout 300 python3 -m tests.benchmarks --only gpu --json "$out/bench_gpu.json" 2>&1 | tee "$out/bench_gpu.log"
