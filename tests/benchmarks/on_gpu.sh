#!/usr/bin/env bash
# Every GPU check of the course, on a machine whose python3 has torch with CUDA:
#   bash tests/benchmarks/on_gpu.sh OUT_DIR [PART ...]      (from the repository root)
# PARTs, all by default: recording (the GPU step that ships with the course), tests (the CUDA-marked tests),
# bench (python -m tests.benchmarks --only gpu), lessons (every lesson of both editions run as a learner with
# this GPU runs it, written to docs/benchmark_results/lessons_on_gpu.json). A device call has a time limit of
# its own: lessons-instructor and lessons-student run one edition each, into the same JSON. Each part has a timeout, so one that hangs cannot
# take the others' results with it.
#
# The lessons need ipywidgets, IPython, ipykernel and nbclient. Where python3 lacks them and has no network,
# carry wheels made by tests/benchmarks/gpu_wheels.sh in .gpu-wheels/: they are installed from there.
set -u
out=${1:?usage: bash tests/benchmarks/on_gpu.sh OUT_DIR [recording] [tests] [bench] [lessons[-instructor|-student]]}
shift
parts=${*:-recording tests bench lessons}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv | tee "$out/gpu.txt"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee -a "$out/gpu.txt"

if ! python3 -c "import ipywidgets, IPython, ipykernel, nbclient, filelock" 2>/dev/null && [ -d .gpu-wheels ]; then
  python3 -m pip install -q --no-index --find-links .gpu-wheels ipywidgets ipykernel nbclient nbformat filelock \
      pytest hypothesis 2>&1 | tail -n 3
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -n 3  # dpcourse itself, for the kernels

for part in $parts; do
  case $part in
    recording)
      timeout 240 python3 -m dpcourse.recording --out "$out/gpu.json" 2>&1 | tee "$out/recording.log" ;;
    tests)
      # -o addopts="": without nbval's options (the notebooks are not run here); -m cuda: the GPU tests only.
      tests=(tests/test_cuda.py tests/test_devices.py tests/test_memory.py tests/test_collectives.py
             tests/test_ddp_practice.py tests/test_recording.py)
      timeout 240 python3 -m pytest -p no:cacheprovider -o addopts="" -m cuda -rs -v "${tests[@]}" \
          --junitxml="$out/cuda_tests.xml" 2>&1 | tee "$out/cuda_tests.log" ;;
    bench)
      timeout 300 python3 -m tests.benchmarks --only gpu --json "$out/bench_gpu.json" 2>&1 | tee "$out/bench_gpu.log" ;;
    lessons|lessons-instructor|lessons-student)
      edition=${part#lessons-}; [ "$edition" = lessons ] && edition=both
      # As a learner with this GPU: DPCOURSE_DEVICES unset, so dpcourse.devices(n) is [cuda:0, ...]; no placement
      # check (IPYTHONDIR unset): the GPU itself checks. Errors are counted, not fatal.
      (unset DPCOURSE_DEVICES IPYTHONDIR
       timeout 900 python3 -m tests.run_lessons --edition "$edition" --json docs/benchmark_results/lessons_on_gpu.json) \
          2>&1 | grep -v "WARNING\|^\[IPKernelApp\]" | tee "$out/lessons_on_gpu.log"
      cp docs/benchmark_results/lessons_on_gpu.json "$out/" 2>/dev/null ;;
    *) echo "unknown part $part (recording, tests, bench, lessons, lessons-instructor, lessons-student)" >&2; exit 2 ;;
  esac
done
