#!/usr/bin/env bash
# GPU check of the KV kernels and the engine on them, under 8 minutes on a CUDA machine (its steps' limits: 150, 90 and
# 180 s; on an H100, 2026-12-05, the first two took 49-70 s together; give the device call ~540 s):
#   1. test/kernels with the Triton kernels COMPILED (TRITON_INTERPRET unset; conftest then runs them on CUDA tensors),
#      which includes a mixed-format pool's layer operations and the tier moves between host and GPU (side stream);
#   2. the paged-decode micro-benchmark per KV format vs torch SDPA on gathered contiguous KV (`bench --suite kernels`),
#      printing time ratios (ours / SDPA) and errors; the full result goes to $RESULT ($OUT/gpu_check_kernels.json);
#   3. the engine end to end (`bench --suite device`): a pi05-random-full action chunk's latency (three cameras) and a
#      batched decode at SmolLM2-135M's shape at batch 1, 8 and 32 (tokens/s); random weights and a byte-level
#      tokenizer, so no model file is needed; the result goes to $DEVICE_RESULT (default $OUT/gpu_check_device.json).
# Runs from the source tree (PYTHONPATH), so it needs torch with CUDA, triton and the engine's packages in $PYTHON (no
# ROS, nothing installed from this repository); it names any that are missing before it starts. The lent H100 image
# (Python 3.12) lacks gguf, llguidance and zstandard: put a folder holding them on PYTHONPATH, e.g. the venv's gguf and
# llguidance (pure Python / abi3, with their .dist-info) and `pip download zstandard --python-version 3.12
# --only-binary=:all: --no-deps` unzipped.
# Without CUDA it says so and exits 2 at once: on CPU the kernel tests run interpreted through `make test` instead.
# Only what steps 1-2 need stops it before it starts; a package only step 3 needs skips step 3, named (one missing
# wheel must not cost the kernel numbers). Results and the full test log go to $OUT when it is set (the device
# tool brings back only that folder).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
DEST=${OUT:-.}
RESULT=${RESULT:-$DEST/gpu_check_kernels.json}
DEVICE_RESULT=${DEVICE_RESULT:-$DEST/gpu_check_device.json}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
unset TRITON_INTERPRET OXYGEN_KERNELS

no_gpu() {
    echo "gpu_check: $1; this check needs a CUDA GPU (nothing was run)" >&2
    exit 2
}
# The driver's device node first (instant), then torch's own view (a few seconds to import).
[ -e /dev/nvidiactl ] || no_gpu "no NVIDIA driver device (/dev/nvidiactl)"
"$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' || no_gpu "torch in $PYTHON sees no CUDA device"
"$PYTHON" - <<'PY' || { echo "gpu_check: nothing was run" >&2; exit 2; }
import importlib.util, sys
needed = ("triton", "numpy", "tqdm", "pytest", "hypothesis")  # the kernel tests and the kernels benchmark
missing = [name for name in needed if importlib.util.find_spec(name) is None]
if missing:
    print(f"gpu_check: {sys.executable} has no {', '.join(missing)}", file=sys.stderr)
    sys.exit(1)
import triton
major = int(triton.__version__.split(".")[0])
if major < 3:  # tl.dot(input_precision=), the maxnreg launch option, tl.div_rn
    print(f"gpu_check: triton {triton.__version__} is older than the kernels need (3.0)", file=sys.stderr)
    sys.exit(1)
PY
device_missing=$("$PYTHON" - <<'PY'
import importlib.util
engine = ("cv2", "tokenizers", "jinja2", "gguf", "llguidance", "zstandard", "safetensors", "yaml")
print(" ".join(name for name in engine if importlib.util.find_spec(name) is None))
PY
)
"$PYTHON" -c 'import torch, triton; p = torch.cuda.get_device_properties(0)
print(f"gpu_check: {p.name} (sm_{p.major}{p.minor}), torch {torch.__version__}, triton {triton.__version__}")'

start=$SECONDS
failed=()
# Each step runs even when one before it failed, so one lease brings back every number it can; the exit status says
# which failed. --confcutdir: only test/kernels/conftest.py is loaded (test/conftest.py needs ROS, which a GPU box may
# not have). test_gpu_targets compiles for five architectures without a GPU (CI does it); here the kernels really
# launch. test_c_kernels checks the CPU decode library on three ISAs with cross tools: a CPU check that CI runs.
# The Triton kernels compile once per configuration: pytest-xdist, where installed, compiles them on several cores.
workers=()
"$PYTHON" -c 'import xdist' 2>/dev/null && workers=(-n 8)
# The test log in full to $DEST; here its short tracebacks and summary (the device tool keeps the output's tail).
timeout -k 5 150 "$PYTHON" -m pytest -q -p no:cacheprovider --confcutdir=test/kernels test/kernels --tb=short \
    ${workers[@]+"${workers[@]}"} --ignore=test/kernels/test_gpu_targets.py --ignore=test/kernels/test_c_kernels.py \
    --durations=10 > "$DEST/gpu_check_kernel_tests.log" 2>&1 || failed+=("kernel tests")
tail -n 40 "$DEST/gpu_check_kernel_tests.log"
echo "gpu_check: kernel tests done, $((SECONDS - start)) s"

timeout -k 5 90 "$PYTHON" -c 'import sys; from oxygen_ros.cli.main import main; sys.exit(main(sys.argv[1:]))' \
    bench --suite kernels --json "$RESULT" || failed+=("kernels benchmark")
echo "gpu_check: kernels benchmark done, $((SECONDS - start)) s"

if [ -n "$device_missing" ]; then
    failed+=("device benchmark: $PYTHON has no $device_missing")
else
    timeout -k 5 180 "$PYTHON" -c 'import sys; from oxygen_ros.cli.main import main; sys.exit(main(sys.argv[1:]))' \
        bench --suite device --json "$DEVICE_RESULT" || failed+=("device benchmark")
fi
echo "gpu_check: done in $((SECONDS - start)) s"
if [ ${#failed[@]} -gt 0 ]; then
    echo "gpu_check: FAILED: ${failed[*]}" >&2
    exit 1
fi
