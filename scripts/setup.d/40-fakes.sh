#!/usr/bin/env bash
# Build the hardware stand-ins into tests/fakes/build/ (bind-mounted read-only
# into the test fleet's nodes at /opt/fleetmedic-fakes):
#   lib/libnvidia-ml.so.1            fake NVML (tests/fakes/nvml/fake_nvml.c)
#   bin/{amd-smi,rocm-smi,rocminfo}  fake AMD tools (tests/fakes/amd/amdfake.py)
#   bin/{nvidia-smi,nvidia-mig-parted}  fake nvidia-smi and mig-parted
#                                    (tests/fakes/nvidia/nvidiasmi.py)
#   bin/all_reduce_perf              fake nccl-tests / rccl-tests (tests/fakes/nccl/allreduce.py)
#   bin/{dcgmi,rvs}                  fake dcgmi diag and ROCm Validation Suite
#                                    (tests/fakes/diag/replay.py)
# Rebuilt only when a source, this script or the compiler changes (key in
# build/.stamp). Files are replaced atomically in place, never the directory,
# so nodes that already mount it see the new build.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SRC="$ROOT/tests/fakes"
OUT="$SRC/build"
log() { printf '[fakes] %s\n' "$*" >&2; }

CC="${CC:-gcc}"
KEY="$( { cat "${BASH_SOURCE[0]}" "$SRC/nvml/fake_nvml.c" "$SRC/amd/amdfake.py" "$SRC/nvidia/nvidiasmi.py" "$SRC/diag/replay.py" "$SRC/nccl/allreduce.py"; "$CC" --version | head -1; } \
        | sha256sum | cut -c1-16)"
# pytest workers run this at once (tests/integration/conftest.py's `fakes` fixture): one builds
mkdir -p "$OUT"
exec 9>"$OUT/.lock"; flock 9
if [[ -f $OUT/.stamp && "$(cat "$OUT/.stamp")" == "$KEY" && -x $OUT/bin/rocminfo \
      && -x $OUT/bin/nvidia-smi && -x $OUT/bin/nvidia-mig-parted && -x $OUT/bin/all_reduce_perf && -x $OUT/bin/dcgmi && -x $OUT/bin/rvs && -f $OUT/lib/libnvidia-ml.so.1 ]]; then
  exit 0
fi

log "building fake libnvidia-ml.so.1, nvidia-smi, dcgmi, rvs and AMD tools ($KEY)"
mkdir -p "$OUT/lib" "$OUT/bin"
"$CC" -std=c11 -O2 -Wall -Wextra -Werror -fPIC -shared -fvisibility=hidden \
  -Wl,-soname,libnvidia-ml.so.1 -o "$OUT/lib/.libnvidia-ml.so.1.tmp" "$SRC/nvml/fake_nvml.c"
mv -f "$OUT/lib/.libnvidia-ml.so.1.tmp" "$OUT/lib/libnvidia-ml.so.1"
for tool in amd-smi rocm-smi rocminfo; do
  install -m 0755 "$SRC/amd/amdfake.py" "$OUT/bin/.$tool.tmp"
  mv -f "$OUT/bin/.$tool.tmp" "$OUT/bin/$tool"
done
for tool in nvidia-smi nvidia-mig-parted; do
  install -m 0755 "$SRC/nvidia/nvidiasmi.py" "$OUT/bin/.$tool.tmp"
  mv -f "$OUT/bin/.$tool.tmp" "$OUT/bin/$tool"
done
install -m 0755 "$SRC/nccl/allreduce.py" "$OUT/bin/.all_reduce_perf.tmp"
mv -f "$OUT/bin/.all_reduce_perf.tmp" "$OUT/bin/all_reduce_perf"
for tool in dcgmi rvs; do
  install -m 0755 "$SRC/diag/replay.py" "$OUT/bin/.$tool.tmp"
  mv -f "$OUT/bin/.$tool.tmp" "$OUT/bin/$tool"
done
echo "$KEY" > "$OUT/.stamp"
