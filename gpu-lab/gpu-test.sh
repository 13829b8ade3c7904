#!/usr/bin/env bash
# Runs on the lent NVIDIA machine (no network, no cmocka/OpenCL headers there; gpu-lab/fetch-debs.sh fills .debs/ here):
# unpacks the Debian packages carried in .debs/ into a prefix, registers the
# NVIDIA OpenCL ICD, builds, runs the whole suite on the GPU and on PoCL, then
# optional benchmarks. Logs and JSON go to $OUT.
#   bash gpu-lab/gpu-test.sh [tests] [pocl] [scan-tests] [inspect] [tune] [demo] [large] [mpi] [mpi-bench] [packed] [pair]
#                   [bench SHAPE...] [bench-scan SHAPE...] [portable SHAPE...]
#                   [prep-ab SHAPE...] [gram-ab] [compare SHAPE...] [packed-ab] [profile SHAPE...]
#                   [prep-sweep] [ctest REGEX] [mma] [transpose-bound] [gram-stride] [kernels SHAPE...]
#                   [ptx-prof TAG FILE KERNEL OPTIONS G L ARG...] [sh COMMAND...]
# transpose-bound: gpu-lab/transpose-bound.c, the prep forward's data movement alone (copies and transposes of q, k, v).
# mma: gpu-lab/mma-throughput.c, the rate of independent mma.sync.m16n8k8 TF32 products (1-16 chains per warp).
# ptx-prof: one kernel's OpenCL PTX under Nsight Compute (through the CUDA driver API, gpu-lab/ptx-run.c), and its SASS.
# gram-stride: the gram's time by row length (B clips of F frames, S tokens: rows of F·S tokens).
# gram-ab: the staged gram at sana480 in variants (lo parts rounded, split staging, cvt rounding, without mma,
#          staging once) and their profile.
# prep-ab: prep forward and backward of each shape in every form (CAMDELTA_PREP_FUSED = 2, 1, 0;
#          CAMDELTA_PREP_BWD_FUSED = 1, 0), then the register-resident forward under each CAMDELTA_PREP_TILES WL and
#          the two-pass backward under a few CAMDELTA_PREP_BWD_TILES settings, TW among them (to pick the
#          defaults), in f32 and bf16.
# large: tests/large_sizes.c at B=3 H=32 D=128 N=219,600 (> 2^31 elements per tensor; about 70 GB of device
#        memory, a few minutes with the f64 reference of the sampled sequences on the host's cores).
# mpi: the sequence-parallel tests and tools under mpirun, 2 ranks sharing the GPU (needs Open MPI in .debs);
#      mpi-bench: the same with only the chunked-pipeline MPI tests (bench at sana720 with 4 MB and 1 MB transfer
#      chunks, and the demo).
# packed: the packed-clip tests and `bench --packed` (packed against fixed shape on equal clips).
# seq-sweep: the sequential forward's tiles at sana480 (CAMDELTA_SEQ_TILES), outputs in the kernel or by phase C.
# pair: the scan-pair and branch tests, and the branch rows at sana480 with their kernels one by one.
# portable: each shape's bench with the vendor path and with CAMDELTA_TC=0, and the demo both ways
#           (docs/portability.md's matrix).
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
# Open MPI from .debs, relocated into the prefix (camdelta_mpi and the MPI tests)
MPI_FLAGS=()
if [ -x "$PREFIX/usr/bin/mpicc.openmpi" ]; then
  # ranks on this node only: no ssh client needed (plm isolated), shared memory (no InfiniBand/UCX probing)
  export OPAL_PREFIX="$PREFIX/usr" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm=isolated \
    OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader
  export LD_LIBRARY_PATH="$LIBDIR/openmpi/lib:$LD_LIBRARY_PATH" PATH="$PREFIX/usr/bin:$PATH"
  MPI_FLAGS=(-DMPI_C_COMPILER="$PREFIX/usr/bin/mpicc.openmpi" -DMPIEXEC_EXECUTABLE="$PREFIX/usr/bin/mpirun.openmpi")
fi
MPIRUN=("$PREFIX/usr/bin/mpirun.openmpi" --oversubscribe --allow-run-as-root)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
ls /etc/OpenCL/vendors | tee -a "$OUT/gpu.txt"

cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PREFIX/usr" -DCAMDELTA_WERROR=ON \
  -DCMOCKA_INCLUDE_DIR="$PREFIX/usr/include" -DCMOCKA_LIBRARY="$LIBDIR/libcmocka.so" \
  -DOpenCL_INCLUDE_DIR="$PREFIX/usr/include" -DOpenCL_LIBRARY="$LIBDIR/libOpenCL.so" "${MPI_FLAGS[@]}" \
  >"$OUT/configure.log" 2>&1 ||
  { tail -40 "$OUT/configure.log"; exit 1; }
cmake --build build-gpu -j16 >"$OUT/build.log" 2>&1 || { grep -E "error|warning" "$OUT/build.log" | head -40; exit 1; }
./build-gpu/camdelta info >"$OUT/info.txt" 2>&1; head -40 "$OUT/info.txt"

rc=0
mode=${1:-tests}
while [ $# -gt 0 ]; do
  case "$1" in
    tests)
      # CTEST_EXCLUDE: a regex of tests left out (e.g. test_plan_golden, whose traces are PoCL's, not the GPU's)
      CAMDELTA_DEVICE=nvidia ctest --test-dir build-gpu --output-on-failure -j4 -V ${CTEST_EXCLUDE:+-E "$CTEST_EXCLUDE"} \
        >"$OUT/ctest-nvidia.log" 2>&1 || rc=1
      grep -E "measure|tests passed|tests failed|\*\*\*Failed|Failed  |Timeout" "$OUT/ctest-nvidia.log" | sort -u | tail -60
      ;;
    pocl)
      CAMDELTA_DEVICE=pocl ctest --test-dir build-gpu --output-on-failure -j8 >"$OUT/ctest-pocl.log" 2>&1 || rc=1
      grep -E "tests passed|tests failed|Failed  |Timeout" "$OUT/ctest-pocl.log" | tail -20
      ;;
    scan-tests)
      CAMDELTA_DEVICE=nvidia ctest --test-dir build-gpu -R test_scan --output-on-failure -V >"$OUT/ctest-nvidia-scan.log" 2>&1 || rc=1
      grep -E "awkward|tensor-core|plan |tests passed|tests failed|Failed  |Timeout|FAILED|ERROR|Failure" "$OUT/ctest-nvidia-scan.log" | sort -u | tail -40
      ;;
    bench-scan)
      # the scan ops only, three arithmetic paths (BENCH_PATHS, default all): the FMA kernels (CAMDELTA_TC=0),
      # split-TF32 exact, tf32;
      # then one profiled run per path with each kernel's time. JSON files go to $OUT/bench-json.tgz.
      shift
      mkdir -p /tmp/bench-json
      for s in "$@"; do
        for p in ${BENCH_PATHS:-fma exact tf32}; do
          prec=$p; tc=1
          [ "$p" = fma ] && prec=exact && tc=0
          CAMDELTA_TC=$tc CAMDELTA_DEVICE=nvidia ./build-gpu/camdelta bench --shape "$s" --only scan --precision "$prec" \
            --peak-tflops 67 --json "/tmp/bench-json/bench-$s-$p.json" 2>&1 | sed "s/^/[$p] /" | tee -a "$OUT/bench.txt" || rc=1
          CAMDELTA_TC=$tc CAMDELTA_PROFILE_KERNELS=1 CAMDELTA_DEVICE=nvidia ./build-gpu/camdelta bench --shape "$s" \
            --only scan --precision "$prec" --reps 1 --warmup 1 >/dev/null 2>"/tmp/kernels-$s-$p.txt" || rc=1
          awk '/camdelta kernel/ {k=substr($0,17,40); sub(/ +$/,"",k); n[k]++; t[k]+=$(NF-1)} END {for (k in n) printf "  %-14s %-28s %8.4f ms avg over %d\n", p, k, t[k]/n[k], n[k]}' \
            p="[$p]" "/tmp/kernels-$s-$p.txt" | sort | tee -a "$OUT/bench.txt"
        done
      done
      tar -C /tmp -czf "$OUT/bench-json.tgz" bench-json
      break
      ;;
    kernels)
      # each row's kernels (KERNELS_ONLY, default "branch"), per run: the sum of a kernel's launches in one call of
      # the operation, averaged over the profiled runs (the first kernel of a row is launched once per call)
      shift
      for s in "$@"; do
        CAMDELTA_PROFILE_KERNELS=1 CAMDELTA_DEVICE=nvidia ./build-gpu/camdelta bench --shape "$s" \
          --only "${KERNELS_ONLY:-branch}" --reps 3 --warmup 1 >"/tmp/kernels-$s.txt" 2>&1 || rc=1
        awk -v s="$s" -f gpu-lab/kernels.awk "/tmp/kernels-$s.txt" | tee -a "$OUT/kernels.txt"
      done
      break
      ;;
    tune)
      # sweep the tensor-core tiles at one shape and store the winners where the library reads them
      CAMDELTA_DEVICE=nvidia ./build-gpu/camdelta tune --shape "${TUNE_SHAPE:-sana480}" --save 2>&1 | tee -a "$OUT/bench.txt" || rc=1
      # the tf32 sweep for comparison (not saved: the saved entry serves both precisions)
      CAMDELTA_DEVICE=nvidia ./build-gpu/camdelta tune --shape "${TUNE_SHAPE:-sana480}" --precision tf32 2>&1 |
        sed 's/^/[tf32] /' | tee -a "$OUT/bench.txt" || rc=1
      ;;
    transpose-bound)
      # gpu-lab/transpose-bound.c: the prep forward's bytes moved without its arithmetic (copies, its register tile, a
      # streaming transpose), q, k and v at sana480
      cc -O2 -std=c11 -I"$PREFIX/usr/include" -o /tmp/transpose-bound gpu-lab/transpose-bound.c -L"$LIBDIR" -lOpenCL || rc=1
      /tmp/transpose-bound gpu-lab/transpose-bound.cl 2>&1 | tee "$OUT/transpose-bound.txt" || rc=1
      ;;
    mma)
      # the tensor cores' rate for the scan's mma.sync.m16n8k8 TF32 (the bound the gram and apply are measured against)
      cc -O2 -std=c11 -I"$PREFIX/usr/include" -o /tmp/mma-throughput gpu-lab/mma-throughput.c -L"$LIBDIR" -lOpenCL || rc=1
      /tmp/mma-throughput gpu-lab/mma-throughput.cl 1.98 132 2>&1 | tee "$OUT/mma.txt" || rc=1
      ;;
    inspect)
      # registers, spills and local memory of the tensor-core kernels at D=112 (ptxas via -cl-nv-verbose)
      cc -O2 -I"$PREFIX/usr/include" -o /tmp/cl-inspect gpu-lab/cl-inspect.c -L"$LIBDIR" -lOpenCL || rc=1
      mkdir -p /tmp/ptx
      cat cl/common.cl cl/gemm_tc.cl >/tmp/gemm_tc_full.cl # as the library builds it (common.cl first)
      for fam in "CD_GRAM -DCD_WM=2 -DCD_WN=4 -DCD_MR=2 -DCD_NR=2 -DCD_KC=32" \
        "CD_GRAM -DCD_WM=7 -DCD_WN=2 -DCD_MR=1 -DCD_NR=7 -DCD_KC=16" \
        "CD_APPLY -DCD_WM=2 -DCD_WN=1 -DCD_MR=2 -DCD_NR=8 -DCD_KC=16" \
        "CD_FRAMES -DCD_WM=2 -DCD_WN=2 -DCD_MR=1 -DCD_NR=7 -DCD_KC=16"; do
        name=$(echo "$fam" | cut -d' ' -f1)
        /tmp/cl-inspect /tmp/gemm_tc_full.cl "-D$fam -DCD_D=112 -DCD_SPLIT=1 -DCD_VEC=1" "/tmp/ptx/$name.ptx" 2>&1 |
          grep -E "==|ptxas|error|spill|Used" | tee -a "$OUT/bench.txt"
      done
      ;;
    demo)
      CAMDELTA_DEVICE=nvidia ./build-gpu/camdelta demo 2>&1 | tee "$OUT/demo-nvidia.txt" || rc=1
      CAMDELTA_DEVICE=nvidia ./build-gpu/camdelta demo --shape 1,20,112,21,128 --chunk-size 3 2>&1 | tee "$OUT/demo-d112.txt" || rc=1
      ;;
    large)
      CAMDELTA_DEVICE=nvidia ./build-gpu/tests/cd_large_sizes 2>&1 | tee "$OUT/large.txt"
      [ "${PIPESTATUS[0]}" = 0 ] || rc=1
      ;;
    mpi | mpi-bench)
      grep -i "mpi" "$OUT/configure.log" | head -3
      if [ "$1" = mpi ]; then
        CAMDELTA_DEVICE=nvidia ctest --test-dir build-gpu -R "mpi|summary" --output-on-failure -V >"$OUT/ctest-mpi.log" 2>&1 || rc=1
        grep -E "measure|tests passed|tests failed|Failed  |Timeout" "$OUT/ctest-mpi.log" | sort -u | tail -40
      else
        # the transfers' pipeline in many small chunks (CAMDELTA_SP_CHUNK_BYTES=100) on the NVIDIA driver
        CAMDELTA_DEVICE=nvidia ctest --test-dir build-gpu -R "mpi_(scan|branch)_chunked_np2" --output-on-failure -V \
          >"$OUT/ctest-mpi-chunked.log" 2>&1 || rc=1
        grep -E "measure|tests passed|tests failed|Failed  |Timeout" "$OUT/ctest-mpi-chunked.log" | sort -u | tail -24
      fi
      # sana720 over 2 ranks sharing the GPU: compute / wait / exchange (d2h, mpi, h2d) per rank, scans and branch,
      # beside one device; then the same over ranks with the transfers in 1 MB chunks instead of 4 MB
      CAMDELTA_DEVICE=nvidia "${MPIRUN[@]}" -np 2 ./build-gpu/camdelta bench --sequence-parallel --shape sana720 \
        --reps 10 --json "$OUT/bench-sp-sana720.json" 2>&1 | tee "$OUT/bench-sp.txt" || rc=1
      CAMDELTA_SP_CHUNK_BYTES=1048576 CAMDELTA_DEVICE=nvidia "${MPIRUN[@]}" -x CAMDELTA_SP_CHUNK_BYTES -np 2 \
        ./build-gpu/camdelta bench --sequence-parallel --shape sana720 --reps 5 --no-single \
        --json "$OUT/bench-sp-sana720-chunk1m.json" 2>&1 | tee "$OUT/bench-sp-chunk1m.txt" || rc=1
      CAMDELTA_DEVICE=nvidia "${MPIRUN[@]}" -np 2 ./build-gpu/camdelta demo --sequence-parallel --shape 1,20,112,21,1560 \
        2>&1 | tee "$OUT/demo-sp.txt" || rc=1
      ;;
    packed)
      CAMDELTA_DEVICE=nvidia ctest --test-dir build-gpu -R "packed" --output-on-failure -V >"$OUT/ctest-packed.log" 2>&1 || rc=1
      grep -E "measure|tests passed|tests failed|Failed  |Timeout" "$OUT/ctest-packed.log" | sort -u | tail -20
      CAMDELTA_DEVICE=nvidia ./build-gpu/camdelta bench --packed --shape 4,20,112,5,1560 2>&1 | tee "$OUT/bench-packed.txt" || rc=1
      CAMDELTA_DEVICE=nvidia ./build-gpu/camdelta bench --packed --shape 2,20,112,21,1560 2>&1 | tee -a "$OUT/bench-packed.txt" || rc=1
      ;;
    compare)
      # before/after in one run: base-src/ (an older tree, e.g. `git archive REV | tar x -C base-src`, carried as an
      # ignored path) built beside this one; each shape's bench with the two builds alternating, twice
      shift
      cmake -S base-src -B build-base -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PREFIX/usr" -DCAMDELTA_BUILD_TESTS=OFF \
        -DCAMDELTA_MPI=OFF -DOpenCL_INCLUDE_DIR="$PREFIX/usr/include" -DOpenCL_LIBRARY="$LIBDIR/libOpenCL.so" \
        >"$OUT/configure-base.log" 2>&1 && cmake --build build-base -j16 --target camdelta_cli >"$OUT/build-base.log" 2>&1 ||
        { tail -20 "$OUT/build-base.log"; exit 1; }
      for s in "$@"; do
        for round in $(seq 1 "${COMPARE_ROUNDS:-2}"); do
          for b in base new; do
            bin=./build-gpu/camdelta
            [ $b = base ] && bin=./build-base/camdelta
            CAMDELTA_DEVICE=nvidia $bin bench --shape "$s" --peak-gbs 4800 --peak-tflops 67 \
              ${BENCH_ARGS:-} --json "$OUT/compare-$s-$b-$round.json" 2>&1 | sed "s/^/[$b $round] /" | tee -a "$OUT/compare.txt" || rc=1
          done
        done
      done
      break
      ;;
    portable)
      # the portable path (what an AMD or Intel GPU runs): each shape's bench rows with the vendor path (tensor cores,
      # inline PTX) and with CAMDELTA_TC=0 (the portable kernels only), then the demo's errors both ways; the figures
      # for docs/portability.md's matrix
      shift
      for s in "$@"; do
        for path in vendor portable; do
          env $([ $path = portable ] && echo CAMDELTA_TC=0) CAMDELTA_DEVICE=nvidia ./build-gpu/camdelta bench \
            --shape "$s" --json "$OUT/bench-$path-$s.json" 2>&1 | sed "s/^/$path: /" | tee -a "$OUT/portable.txt" || rc=1
        done
      done
      for path in vendor portable; do
        env $([ $path = portable ] && echo CAMDELTA_TC=0) CAMDELTA_DEVICE=nvidia ./build-gpu/camdelta demo \
          --shape 1,2,112,3,20 2>&1 | sed "s/^/$path: /" | tee -a "$OUT/portable.txt" || rc=1
      done
      break
      ;;
    bench)
      shift
      for s in "$@"; do
        CAMDELTA_DEVICE=nvidia ./build-gpu/camdelta bench --shape "$s" --peak-gbs 4800 --peak-tflops 67 \
          --json "$OUT/bench-$s.json" 2>&1 | tee -a "$OUT/bench.txt" || rc=1
      done
      break
      ;;
    pair)
      # the fused scan pair (src/scan/pair.c): its tests and the branch's on the GPU, then the branch rows at
      # sana480 and their kernels one by one
      CAMDELTA_DEVICE=nvidia ctest --test-dir build-gpu -R "test_scan_pair|test_branch$|test_scan_precision" \
        --output-on-failure -V >"$OUT/ctest-pair.log" 2>&1 || rc=1
      grep -E "measure|tests passed|tests failed|Failed  |Timeout|FAILED|ERROR" "$OUT/ctest-pair.log" | sort -u | tail -40
      CAMDELTA_DEVICE=nvidia ./build-gpu/camdelta bench --shape sana480 --only branch \
        --json "$OUT/bench-pair.json" 2>&1 | tee -a "$OUT/bench-pair.txt" || rc=1
      CAMDELTA_PROFILE_KERNELS=1 CAMDELTA_DEVICE=nvidia ./build-gpu/camdelta bench \
        --shape sana480 --only branch --reps 1 --warmup 1 >/dev/null 2>"/tmp/kernels-pair.txt" || rc=1
      awk '/camdelta kernel/ {k=substr($0,17,40); sub(/ +$/,"",k); n[k]++; t[k]+=$(NF-1)} END {for (k in n) printf "  %-28s %8.4f ms avg over %d\n", k, t[k]/n[k], n[k]}' \
        "/tmp/kernels-pair.txt" | sort | tee -a "$OUT/bench-pair.txt"
      ;;
    seq-cal)
      # the sequential forward with the default tiles at three shapes, tensor cores on and off (CAMDELTA_TC=0), each
      # kernel's time (the cost model's calibration, src/scan/cost.c); then tiles around the default at sana480
      for s in sana480 1,20,64,21,1560 sana720; do
        for tc in 1 0; do
          CAMDELTA_TC=$tc CAMDELTA_PROFILE_KERNELS=1 CAMDELTA_DEVICE=nvidia ./build-gpu/camdelta bench --shape "$s" \
            --only "sequential causal" --reps 3 --warmup 1 >"/tmp/seqcal.txt" 2>&1 || rc=1
          grep -E "^scan-forward" /tmp/seqcal.txt | sed "s/^/seq-cal $s tc=$tc /" | tee -a "$OUT/seq-cal.txt"
          awk '/camdelta kernel/ {k=substr($0,17,40); sub(/ +$/,"",k); n[k]++; t[k]+=$(NF-1)} END {for (k in n) printf "seq-cal %s tc=%s %-28s %8.4f ms avg over %d\n", s, tc, k, t[k]/n[k], n[k]}' \
            s="$s" tc=$tc /tmp/seqcal.txt | tee -a "$OUT/seq-cal.txt"
        done
      done
      for cfg in ${SEQ_CAL_TILES:-J=8,W=64 J=4,W=64 J=4,W=128 J=8,TS=48 J=16,W=64}; do
        t=$(CAMDELTA_SEQ_TILES="$cfg" CAMDELTA_DEVICE=nvidia ./build-gpu/camdelta bench --shape sana480 \
          --only "sequential causal" --reps 10 2>&1 | awk '/^scan-forward/ {print $4} /n\/a/ {print "n/a"}' | head -1)
        echo "seq-cal sweep $cfg ${t:-fail}" | tee -a "$OUT/seq-cal.txt"
      done
      # the packed forward's difference: a fixed-shape call laid out like the packed one (1 x 20 frames, N = 31200)
      for s in 4,20,112,5,1560 1,20,112,20,1560; do
        CAMDELTA_PROFILE_KERNELS=1 CAMDELTA_DEVICE=nvidia ./build-gpu/camdelta bench --shape "$s" \
          --only "chunkwise causal" --reps 5 --warmup 1 >"/tmp/pk.txt" 2>&1 || rc=1
        grep -E "^scan-forward" /tmp/pk.txt | sed "s/^/layout $s /" | tee -a "$OUT/seq-cal.txt"
        awk '/camdelta kernel/ {k=substr($0,17,40); sub(/ +$/,"",k); n[k]++; t[k]+=$(NF-1)} END {for (k in n) printf "layout %s %-28s %8.4f ms avg over %d\n", s, k, t[k]/n[k], n[k]}' \
          s="$s" /tmp/pk.txt | tee -a "$OUT/seq-cal.txt"
      done
      ;;
    packed-ab)
      # the packed forward and backward against the fixed shape's (equal clips), and a kernel profile of each
      for shp in 4,20,112,5,1560 2,20,112,21,1560; do
        CAMDELTA_DEVICE=nvidia ./build-gpu/camdelta bench --packed --shape $shp 2>&1 | tee -a "$OUT/packed-ab.txt"
      done
      CAMDELTA_PROFILE_KERNELS=1 CAMDELTA_DEVICE=nvidia ./build-gpu/camdelta bench --packed --shape 4,20,112,5,1560 \
        --reps 3 --warmup 1 >/dev/null 2>"$OUT/packed-kernels.txt"
      ;;
    prep-sweep)
      # the staged one-pass prep forward (CAMDELTA_PREP_FUSED=1) at sana480 under CAMDELTA_PREP_TILES: tokens per
      # tile TT, work-groups per SM WPC; then the register-resident form (the default at 20 heads) at each TT
      for TT in 8 16 4; do for W in 1 2 4 8 16 64; do
        t=$(CAMDELTA_PREP_FUSED=1 CAMDELTA_PREP_TILES="TT=$TT,WPC=$W" CAMDELTA_DEVICE=nvidia ./build-gpu/camdelta bench --shape sana480 \
          --only prep-forward --reps 10 2>&1 | awk '/^prep-forward/ {print $2}' | head -1)
        echo "prep-sweep TT=$TT WPC=$W ${t:-fail}" | tee -a "$OUT/prep-sweep.txt"
      done; done
      for TT in 8 16 4; do
        t=$(CAMDELTA_PREP_FUSED=2 CAMDELTA_PREP_TILES="TT=$TT" CAMDELTA_DEVICE=nvidia ./build-gpu/camdelta bench \
          --shape sana480 --only prep-forward --reps 10 2>&1 | awk '/^prep-forward/ {print $2}' | head -1)
        echo "prep-sweep register-resident TT=$TT ${t:-fail}" | tee -a "$OUT/prep-sweep.txt"
      done
      ;;
    sh)
      # the rest of the line as one shell command, in this script's environment (the prefix's libraries, the NVIDIA
      # ICD, build-gpu built): ad-hoc runs of ./build-gpu/camdelta with options or variables
      shift
      CAMDELTA_DEVICE=nvidia bash -c "$*" 2>&1 | tee -a "$OUT/sh.txt" || rc=1
      break
      ;;
    ctest)
      # the ctest programs whose names match $2, on the GPU
      shift
      log="$OUT/ctest-$(echo "$1" | tr -c 'A-Za-z0-9_\n' '_').log" # a file name the device tool brings back
      CAMDELTA_DEVICE=nvidia ctest --test-dir build-gpu -R "$1" --output-on-failure -V >"$log" 2>&1 || rc=1
      grep -E "measure|tests passed|tests failed|Failed  |Timeout|ERROR|FAILED" "$log" | sort -u | tail -30
      ;;
    profile)
      # the scan's kernels one by one (CAMDELTA_PROFILE_KERNELS=1), average ms per launch and launches, per shape
      shift
      while [ $# -gt 0 ] && [[ "$1" =~ ^[0-9,]+$|^sana ]]; do
        for op in "forward chunkwise causal" "backward causal"; do
          CAMDELTA_PROFILE_KERNELS=1 CAMDELTA_DEVICE=nvidia ./build-gpu/camdelta bench --shape "$1" --only "$op" \
            --reps 5 --warmup 1 >/dev/null 2>"/tmp/prof.txt" || rc=1
          awk '/camdelta kernel/ {n[$3]++; t[$3]+=$(NF-1)} END {for (k in t) printf "%-32s %8.4f ms x %d\n", k, t[k]/n[k], n[k]}' \
            /tmp/prof.txt | sort | sed "s/^/profile $1 $op: /" | tee -a "$OUT/profile.txt"
        done
        shift
      done
      continue
      ;;
    gram-stride)
      # phase A (cd_gram_tc) by row length: the same 20 frames per head laid out as B clips of F frames (rows of
      # F·S tokens) and other row lengths; the packed path's rows are the whole batch's (docs/tried.md, packed clips)
      for s in 4,20,112,5,1560 2,20,112,10,1560 1,20,112,20,1560 4,20,112,5,1564 2,20,112,10,1564 \
        1,20,112,20,1564 1,20,112,20,1568 1,20,112,20,1552 1,20,112,15,1560 1,20,112,16,1560 1,20,112,25,1560; do
        CAMDELTA_PROFILE_KERNELS=1 CAMDELTA_DEVICE=nvidia ./build-gpu/camdelta bench --shape "$s" \
          --only "forward chunkwise causal" --reps 5 --warmup 1 >/dev/null 2>"/tmp/prof.txt" || rc=1
        awk '/camdelta kernel/ && /gram/ {n++; t+=$(NF-1)} END {printf "gram-stride %-18s cd_gram_tc %.4f ms\n", s, t/n}' \
          s="$s" /tmp/prof.txt | tee -a "$OUT/gram-stride.txt"
      done
      ;;
    ptx-prof)
      # ptx-prof TAG FILE.cl KERNEL "OPTIONS" GX,GY,GZ LX,LY,LZ ARG... (the rest of the line): one kernel as the NVIDIA
      # OpenCL compiler builds it (gpu-lab/cl-inspect.c: registers, PTX), run through the CUDA driver API (gpu-lab/ptx-run.c,
      # ARG as it says) so that Nsight Compute measures it: its time, the details page, the stall samples by reason
      # and SASS opcode (gpu-lab/ncu-stalls.py), and the SASS (ptxas + cuobjdump) in $OUT/ptx-TAG.sass.
      # Caution: Nsight Compute has run past a 600 s limit without output on cd_prep_bwd_grads at N = 4096 and
      # above; give it a call of its own.
      shift
      tag=$1 file=$2 kern=$3 opts=$4 grid=$5 loc=$6
      shift 6
      CUDA=${CUDA_HOME:-/usr/local/cuda}
      export PATH="$CUDA/bin:$PATH"
      NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
      [ -x /tmp/cl-inspect ] || cc -O2 -I"$PREFIX/usr/include" -o /tmp/cl-inspect gpu-lab/cl-inspect.c -L"$LIBDIR" -lOpenCL || rc=1
      [ -x /tmp/ptx-run ] || cc -O2 -I"$CUDA/include" -o /tmp/ptx-run gpu-lab/ptx-run.c -L"$CUDA/lib64/stubs" -lcuda || rc=1
      mkdir -p /tmp/ptx
      # as the library composes it (common.cl first), with the other kernels of the file left out (gpu-lab/one-kernel.py:
      # the driver API refused the four-kernel module of prep.cl, and took it with only the kernel to measure; a
      # kernel with a local-memory pointer parameter, like the one-pass prep backward this repository had, did not load)
      { cat cl/common.cl && python3 gpu-lab/one-kernel.py "cl/$file" "$kern"; } >"/tmp/ptx/$tag.cl" || rc=1
      /tmp/cl-inspect "/tmp/ptx/$tag.cl" "$opts" "/tmp/ptx/$tag.bin" 2>&1 | grep -E "error|spill|Used" | sed "s/^/[$tag] /" |
        tee -a "$OUT/ptx-prof.txt"
      # the binary ends in a NUL; %envreg0..2 hold OpenCL's group-id offsets, zero in these launches
      tr -d '\000' <"/tmp/ptx/$tag.bin" | sed -E 's/%envreg[0-9]+/0/g' >"/tmp/ptx/$tag.ptx"
      ptxas -arch=sm_90 "/tmp/ptx/$tag.ptx" -o "/tmp/ptx/$tag.cubin" && cuobjdump -sass "/tmp/ptx/$tag.cubin" >"$OUT/ptx-$tag.sass"
      /tmp/ptx-run "/tmp/ptx/$tag.ptx" "$kern" "$grid" "$loc" 20 "$@" 2>&1 | sed "s/^/[$tag] /" | tee -a "$OUT/ptx-prof.txt" || rc=1
      "$NCU" --clock-control none --launch-skip 3 --launch-count 1 --set full --import-source no -o "/tmp/ncu-$tag" \
        /tmp/ptx-run "/tmp/ptx/$tag.ptx" "$kern" "$grid" "$loc" 1 "$@" >"$OUT/ncu-$tag.log" 2>&1 || rc=1
      "$NCU" -i "/tmp/ncu-$tag.ncu-rep" --page details >"$OUT/ncu-$tag.txt" 2>&1
      "$NCU" -i "/tmp/ncu-$tag.ncu-rep" --page source --csv --print-source sass >"/tmp/ncu-src-$tag.csv" 2>&1
      grep -E "^    (Duration|Registers Per Thread|Achieved Occupancy|Issue Slots Busy|L2 Hit Rate|DRAM Throughput) " \
        "$OUT/ncu-$tag.txt" | sed "s/^ */[$tag] /" | tee -a "$OUT/ptx-prof.txt"
      python3 gpu-lab/ncu-stalls.py "/tmp/ncu-src-$tag.csv" 12 | sed "s/^/[$tag] /" | tee -a "$OUT/ptx-prof.txt"
      break
      ;;
    seq-sweep)
      # the sequential forward at sana480 under CAMDELTA_SEQ_TILES: value columns J, tokens per tile TS, work-group
      # W, outputs in the kernel (OUT=1) or by phase C (OUT=2); then the best three without prefetch (PF=2)
      for J in 16 8; do for TS in 64 32; do for W in 128 256 512; do for O in 1 2; do
        t=$(CAMDELTA_SEQ_TILES="J=$J,TS=$TS,W=$W,OUT=$O" CAMDELTA_DEVICE=nvidia ./build-gpu/camdelta bench --shape sana480 \
          --only "sequential causal" --reps 10 2>&1 | awk '/^scan-forward/ {print $4} /n\/a/ {print "n/a"}' | head -1)
        echo "seq-sweep J=$J TS=$TS W=$W OUT=$O ${t:-fail}" | tee -a "$OUT/seq-sweep.txt"
      done; done; done; done
      for cfg in $(sort -k6 -g "$OUT/seq-sweep.txt" | grep -v "n/a\\|fail" | head -3 | awk '{print $2","$3","$4","$5}'); do
        t=$(CAMDELTA_SEQ_TILES="$cfg,PF=2" CAMDELTA_DEVICE=nvidia ./build-gpu/camdelta bench \
          --shape sana480 --only "sequential causal" --reps 10 2>&1 | awk '/^scan-forward/ {print $4}')
        echo "seq-sweep no-prefetch $cfg $t" | tee -a "$OUT/seq-sweep.txt"
      done
      CAMDELTA_PROFILE_KERNELS=1 CAMDELTA_DEVICE=nvidia ./build-gpu/camdelta bench --shape sana480 --only "sequential" \
        --reps 2 --warmup 1 2>&1 | grep -E "camdelta kernel|^scan" | sort | uniq -c | tail -12 | tee -a "$OUT/seq-sweep.txt"
      ;;
    gram-ab)
      # the staged gram (phase A of the forward at sana480) in variants built from copies of cl/ (CAMDELTA_KERNEL_DIR):
      # as is; lo parts rounded (CD_LO_ROUND 1); hi and lo staged instead of the f32 values (CD_STAGE_F32 0); TF32
      # rounding by cvt.rna (CD_TF32_CVT 1); without
      # the mma (staging and loads only); staging only the first chunk (mma, fragment loads and barriers only).
      # Accuracy of the round variant from the precision tests.
      for v in base round split cvt nomma nostage; do
        rm -rf "/tmp/k-$v" && cp -r cl "/tmp/k-$v"
        case $v in
          round) sed -i 's/^#define CD_LO_ROUND 0/#define CD_LO_ROUND 1/' "/tmp/k-$v/gemm_tc.cl" ;;
          split) sed -i 's/^#define CD_STAGE_F32 1/#define CD_STAGE_F32 0/' "/tmp/k-$v/gemm_tc.cl" ;;
          cvt) sed -i 's/^#define CD_TF32_CVT .*/#define CD_TF32_CVT 1/' "/tmp/k-$v/gemm_tc.cl" ;;
          nomma) sed -i 's/^    cd_tc_tile(tot, Xs/    if (0) cd_tc_tile(tot, Xs/' "/tmp/k-$v/gemm_tc.cl" ;;
          nostage) sed -i 's/if (e < CD_UX) cd_put_row8/if (e < CD_UX \&\& s0 == 0) cd_put_row8/; s/if (e < CD_UY) cd_put_row8/if (e < CD_UY \&\& s0 == 0) cd_put_row8/' "/tmp/k-$v/gemm_tc.cl" ;;
        esac
        for prec in exact tf32; do
          CAMDELTA_KERNEL_DIR="/tmp/k-$v" CAMDELTA_PROFILE_KERNELS=1 CAMDELTA_DEVICE=nvidia ./build-gpu/camdelta bench \
            --shape sana480 --only "forward chunkwise causal" --precision $prec --reps 5 --warmup 1 >/dev/null 2>"/tmp/kern-$v.txt" || rc=1
          awk '/camdelta kernel/ && /gram/ {n++; t+=$(NF-1)} END {printf "gram-ab %-8s %-6s cd_gram_tc phase A %.4f ms (avg of %d)\n", v, p, t/n, n}' \
            v=$v p=$prec "/tmp/kern-$v.txt" | tee -a "$OUT/gram-ab.txt"
        done
      done
      CAMDELTA_KERNEL_DIR=/tmp/k-round CAMDELTA_DEVICE=nvidia ./build-gpu/tests/test_scan_precision 2>&1 |
        grep -E "measure|FAIL|PASS" | sed 's/^/gram-ab round: /' | tee -a "$OUT/gram-ab.txt"
      CAMDELTA_KERNEL_DIR=/tmp/k-round CAMDELTA_DEVICE=nvidia ./build-gpu/tests/test_scan_backward 2>&1 |
        grep -E "measure.*err|FAIL|PASS" | sed 's/^/gram-ab round: /' | tee -a "$OUT/gram-ab.txt"
      ;;
    prep-ab)
      shift
      for s in "$@"; do
        for v in "PREP_FUSED=2 forward" "PREP_FUSED=1 forward" "PREP_FUSED=0 forward" "PREP_BWD_FUSED=1 backward" \
          "PREP_BWD_FUSED=0 backward"; do
          set -- $v
          echo "== $s CAMDELTA_$1" | tee -a "$OUT/prep-ab.txt"
          env "CAMDELTA_$1" CAMDELTA_DEVICE=nvidia ./build-gpu/camdelta bench --shape "$s" --only "prep-$2" 2>&1 |
            tee -a "$OUT/prep-ab.txt" | grep -E "^prep|rror" || rc=1
        done
        for dt in f32 bf16; do
          for t in WL=1 WL=2 WL=3; do
            echo "== $s $dt CAMDELTA_PREP_TILES=$t" | tee -a "$OUT/prep-ab.txt"
            CAMDELTA_PREP_FUSED=2 CAMDELTA_PREP_TILES=$t CAMDELTA_DEVICE=nvidia ./build-gpu/camdelta bench \
              --shape "$s" --dtype $dt --only prep-forward 2>&1 | tee -a "$OUT/prep-ab.txt" | grep -E "^prep|rror" || rc=1
          done
          for t in WPC=8 WPC=32 TT=8 NU=1 NU=4 TS=32 TS=128 TW=1 TW=3; do
            echo "== $s $dt CAMDELTA_PREP_BWD_TILES=$t" | tee -a "$OUT/prep-ab.txt"
            CAMDELTA_PREP_BWD_FUSED=1 CAMDELTA_PREP_BWD_TILES=$t CAMDELTA_DEVICE=nvidia ./build-gpu/camdelta bench \
              --shape "$s" --dtype $dt --only prep-backward 2>&1 | tee -a "$OUT/prep-ab.txt" | grep -E "^prep|rror" || rc=1
          done
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
