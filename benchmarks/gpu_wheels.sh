#!/usr/bin/env bash
# Make the wheels benchmarks/gpu_check.sh installs on a GPU machine that has no network:
#
#     benchmarks/gpu_wheels.sh            # on a machine with network: fills benchmarks/wheels/ (git-ignored)
#
# Binary wheels only (`--only-binary=:all:`), for each Python in $PYTHONS (default 3.11 to 3.14)
# and manylinux on $ARCH (default x86_64), at the versions constraints.txt pins: what gradtui
# needs beyond torch (textual, textual-plotext, plotext, msgspec, textual-serve and their
# dependencies, numpy), what the CUDA tests need (pytest and its plugins, expecttest and
# hypothesis for torch's OpInfo database) and setuptools (the editable install, built with no
# network). torch with CUDA, networkx, rich and aiohttp are assumed present on the GPU machine;
# the wheels of the last two come along as dependencies anyway. $GRADTUI_WHEELS: another folder.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEST=${GRADTUI_WHEELS:-$ROOT/benchmarks/wheels}
PYTHONS=${PYTHONS:-"3.11 3.12 3.13 3.14"}
ARCH=${ARCH:-x86_64}
PIP=${PIP:-python -m pip}
PACKAGES=(textual textual-plotext plotext msgspec textual-serve aiohttp-jinja2 numpy "setuptools>=77"
          pytest pytest-timeout pytest-xdist pytest-asyncio expecttest hypothesis)
mkdir -p "$DEST"
for version in $PYTHONS; do
    echo "gpu_wheels: Python $version, manylinux $ARCH -> $DEST"
    if ! $PIP download --quiet --dest "$DEST" --constraint "$ROOT/constraints.txt" --only-binary=:all: \
            --python-version "$version" --implementation cp --abi "cp${version/./}" --abi abi3 --abi none \
            --platform "manylinux2014_$ARCH" --platform "manylinux_2_17_$ARCH" --platform "manylinux_2_28_$ARCH" \
            "${PACKAGES[@]}"; then
        echo "gpu_wheels: no complete set of wheels for Python $version (left out)" >&2
    fi
done
echo "gpu_wheels: $(ls "$DEST" | wc -l) wheels, $(du -sh "$DEST" | cut -f1) in $DEST"
