#!/usr/bin/env bash
# Runs on the lent NVIDIA machine (no network, no cmocka/OpenCL headers there; ci/fetch-debs.sh fills .debs/ here):
# unpacks the Debian packages carried in .debs/ into a prefix, registers the
# NVIDIA OpenCL ICD, builds, runs the whole suite on the GPU and on PoCL, then
# optional benchmarks. Logs and JSON go to $OUT.
#   bash ci/gpu-test.sh [tests] [pocl] [demo] [large] [bench SHAPE...] [prep-ab SHAPE...]
# prep-ab: prep forward and backward of each shape in both forms (CAMDELTA_PREP_FUSED, CAMDELTA_PREP_BWD_FUSED =
#          0 and 1), then the fused backward under a few CAMDELTA_PREP_BWD_TILES settings (to pick the defaults).
# large: tests/large_sizes.c at B=3 H=32 D=128 N=219,600 (> 2^31 elements per tensor; about 70 GB of device
#        memory, a few minutes with the f64 reference of the sampled sequences on the host's cores).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/camdelta-out}
PREFIX=/tmp/camdelta-prefix
mkdir -p "$OUT" "$PREFIX"
for f in .debs/*.deb; do dpkg -x "$f" "$PREFIX"; done
mkdir -p /etc/OpenCL/vendors
echo /usr/local/nvidia/lib64/libnvidia-opencl.so.1 >/etc/OpenCL/vendors/nvidia.icd
LIBDIR="$PREFIX/usr/lib/x86_64-linux-gnu"
export LD_LIBRARY_PATH="$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OCL_ICD_VENDORS=/etc/OpenCL/vendors
export LIBRARY_PATH="$LIBDIR${LIBRARY_PATH:+:$LIBRARY_PATH}"  # static links of the consumer test
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
ls /etc/OpenCL/vendors | tee -a "$OUT/gpu.txt"

cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PREFIX/usr" -DCAMDELTA_WERROR=ON \
  -DCMOCKA_INCLUDE_DIR="$PREFIX/usr/include" -DCMOCKA_LIBRARY="$LIBDIR/libcmocka.so" \
  -DOpenCL_INCLUDE_DIR="$PREFIX/usr/include" -DOpenCL_LIBRARY="$LIBDIR/libOpenCL.so" >"$OUT/configure.log" 2>&1 ||
  { tail -40 "$OUT/configure.log"; exit 1; }
cmake --build build-gpu -j16 >"$OUT/build.log" 2>&1 || { grep -E "error|warning" "$OUT/build.log" | head -40; exit 1; }
./build-gpu/camdelta info >"$OUT/info.txt" 2>&1; head -40 "$OUT/info.txt"

rc=0
mode=${1:-tests}
while [ $# -gt 0 ]; do
  case "$1" in
    tests)
      CAMDELTA_DEVICE=nvidia ctest --test-dir build-gpu --output-on-failure -j4 -V >"$OUT/ctest-nvidia.log" 2>&1 || rc=1
      grep -E "measure|tests passed|tests failed|\*\*\*Failed|Failed  |Timeout" "$OUT/ctest-nvidia.log" | sort -u | tail -60
      ;;
    pocl)
      CAMDELTA_DEVICE=pocl ctest --test-dir build-gpu --output-on-failure -j8 >"$OUT/ctest-pocl.log" 2>&1 || rc=1
      grep -E "tests passed|tests failed|Failed  |Timeout" "$OUT/ctest-pocl.log" | tail -20
      ;;
    demo)
      CAMDELTA_DEVICE=nvidia ./build-gpu/camdelta demo 2>&1 | tee "$OUT/demo-nvidia.txt" || rc=1
      CAMDELTA_DEVICE=nvidia ./build-gpu/camdelta demo --shape 1,20,112,21,128 2>&1 | tee "$OUT/demo-d112.txt" || rc=1
      ;;
    large)
      CAMDELTA_DEVICE=nvidia ./build-gpu/tests/cd_large_sizes 2>&1 | tee "$OUT/large.txt"
      [ "${PIPESTATUS[0]}" = 0 ] || rc=1
      ;;
    bench)
      shift
      for s in "$@"; do
        CAMDELTA_DEVICE=nvidia ./build-gpu/camdelta bench --shape "$s" --peak-gbs 4800 --peak-tflops 67 \
          --json "$OUT/bench-$s.json" 2>&1 | tee -a "$OUT/bench.txt" || rc=1
      done
      break
      ;;
    prep-ab)
      shift
      for s in "$@"; do
        for v in "PREP_FUSED=1 forward" "PREP_FUSED=0 forward" "PREP_BWD_FUSED=1 backward" "PREP_BWD_FUSED=0 backward"; do
          set -- $v
          echo "== $s CAMDELTA_$1" | tee -a "$OUT/prep-ab.txt"
          env "CAMDELTA_$1" CAMDELTA_DEVICE=nvidia ./build-gpu/camdelta bench --shape "$s" --only "prep-$2" 2>&1 |
            tee -a "$OUT/prep-ab.txt" | grep -E "^prep|rror" || rc=1
        done
        for t in WPC=1 WPC=2 WPC=8 PF=1 TT=16 TT=4; do
          echo "== $s CAMDELTA_PREP_BWD_TILES=$t" | tee -a "$OUT/prep-ab.txt"
          CAMDELTA_PREP_BWD_FUSED=1 CAMDELTA_PREP_BWD_TILES=$t CAMDELTA_DEVICE=nvidia ./build-gpu/camdelta bench \
            --shape "$s" --only prep-backward 2>&1 | tee -a "$OUT/prep-ab.txt" | grep -E "^prep|rror" || rc=1
        done
      done
      break
      ;;
    *) echo "unknown mode $1"; exit 2 ;;
  esac
  shift
done
echo "mode=$mode rc=$rc"
exit $rc
