#!/usr/bin/env bash
# Wheels for a GPU machine whose Python lacks what the lessons need (ipywidgets, IPython, ipykernel, nbclient):
# run here, where PyPI is reachable, then carry the folder to the GPU machine, where on_gpu.sh installs from it
# without a network. The GPU machine's Python version is the first argument (its `python3 --version`).
#   bash tests/benchmarks/gpu_wheels.sh 3.12 .gpu-wheels
set -euo pipefail
python_version=${1:?usage: bash tests/benchmarks/gpu_wheels.sh PYTHON_VERSION [DIR]}
dir=${2:-.gpu-wheels}
mkdir -p "$dir"
# Everything but torch, numpy and matplotlib, which the GPU machine has; --only-binary so that no package is
# built there.
python3 -m pip download -q -d "$dir" --only-binary=:all: --platform manylinux2014_x86_64 \
    --python-version "$python_version" \
    "ipywidgets~=8.1" ipykernel nbclient nbformat filelock pytest hypothesis
du -sh "$dir"
