#!/usr/bin/env bash
# NOTE: on devices with the tensor-core path (the H200) the scan's GEMM phases run cl/gemm_tc.cl, whose tiles
# `camdelta tune --save` sweeps and stores (bash gpu-lab/gpu-test.sh tune); this script tunes the portable FMA
# kernels, which run there only with CAMDELTA_TC=0 (set below) and everywhere else.
# Tile sweep for the chunkwise scan forward (phases A, B, C) and the scan backward (grams, frames) on the lent
# NVIDIA machine, at the sana480 shape (B=1 H=20 D=112 F=21 S=1560). Same setup as gpu-lab/gpu-test.sh (packages from
# .debs/ unpacked into a prefix, NVIDIA ICD); reuses build-gpu/ when it is configured, else configures it the same
# way, and (re)builds only the CLI.
#   bash gpu-lab/gpu-tune.sh [fwd] [bwd]          (default: both)
# Each candidate is one `camdelta bench --only <op>` run with CAMDELTA_SCAN_TILES / CAMDELTA_SCAN_BWD_TILES set
# and CAMDELTA_PROFILE_KERNELS=1; it prints one line with the per-kernel median ms (all profiled launches: 1
# warm-up + 3 reps). The kernels of one op are independent, so each candidate sets one phase-A, one phase-B and
# one phase-C tile setting (backward: one grams and one frames setting) and every kernel column is ranked on its
# own. A candidate that fails (build error, rejected tiles, timeout) prints FAIL with the reason and the sweep goes
# on. Stops starting candidates after TUNE_BUDGET_S seconds (default 300; one run is cut at 45 s).
# Logs (each run's stdout/stderr, summary.txt) go to $OUT/tune/.
# Dry run elsewhere: TUNE_LOCAL=1 (no package/ICD setup) TUNE_BUILD=build-tune TUNE_DEVICE=pocl TUNE_SHAPE=small.
set -uo pipefail
export CAMDELTA_TC=0
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/camdelta-out}
PREFIX=/tmp/camdelta-prefix
BUDGET=${TUNE_BUDGET_S:-300}
SHAPE=${TUNE_SHAPE:-sana480}
DEVICE=${TUNE_DEVICE:-nvidia}
BUILD=${TUNE_BUILD:-build-gpu}
mkdir -p "$OUT/tune" "$PREFIX"
if [ -n "${TUNE_LOCAL:-}" ]; then :; else
if [ ! -d "$PREFIX/usr/lib/x86_64-linux-gnu" ]; then for f in .debs/*.deb; do dpkg -x "$f" "$PREFIX"; done; fi
mkdir -p /etc/OpenCL/vendors
[ -f /etc/OpenCL/vendors/nvidia.icd ] ||
  echo /usr/local/nvidia/lib64/libnvidia-opencl.so.1 >/etc/OpenCL/vendors/nvidia.icd
LIBDIR="$PREFIX/usr/lib/x86_64-linux-gnu"
export LD_LIBRARY_PATH="$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OCL_ICD_VENDORS=/etc/OpenCL/vendors
export LIBRARY_PATH="$LIBDIR${LIBRARY_PATH:+:$LIBRARY_PATH}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>/dev/null |
  tee "$OUT/tune/gpu.txt"

if [ ! -f build-gpu/CMakeCache.txt ]; then
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PREFIX/usr" -DCAMDELTA_WERROR=ON \
    -DCMOCKA_INCLUDE_DIR="$PREFIX/usr/include" -DCMOCKA_LIBRARY="$LIBDIR/libcmocka.so" \
    -DOpenCL_INCLUDE_DIR="$PREFIX/usr/include" -DOpenCL_LIBRARY="$LIBDIR/libOpenCL.so" \
    >"$OUT/tune/configure.log" 2>&1 ||
    { tail -40 "$OUT/tune/configure.log"; exit 1; }
fi
cmake --build build-gpu -j16 --target camdelta_cli >"$OUT/tune/build.log" 2>&1 ||
  { grep -E "error|warning" "$OUT/tune/build.log" | head -40; exit 1; }
fi
CLI=./$BUILD/camdelta

# ------------------------------------------------------------------------------------------------ candidates
# Forward: "A part|B part|C part" (each a CAMDELTA_SCAN_TILES fragment, empty = the library's choice). D = 112
# favours 7-, 14- and 28-wide blocks; the library's choice is A 8x7 by 8x7 (W=64, 56x56 tiles, KC=32),
# B J=16 64x2 by 4x4 (W=256), C 16x7 by 8x8 (W=128, 112x64 tiles, KC=16).
FWD=(
  "||"
  "A_WR=16,A_RM=7,A_WC=8,A_RN=7,A_KC=32|B_J=8,B_WR=64,B_RM=2,B_WC=4,B_RN=2|C_WR=16,C_RM=7,C_WC=16,C_RN=4,C_KC=16"
  "A_WR=16,A_RM=7,A_WC=16,A_RN=7,A_KC=16|B_J=16,B_WR=128,B_RM=1,B_WC=4,B_RN=4|C_WR=16,C_RM=7,C_WC=16,C_RN=8,C_KC=16"
  "A_WR=16,A_RM=7,A_WC=16,A_RN=7,A_KC=32|B_KC=8|C_WR=8,C_RM=14,C_WC=16,C_RN=8,C_KC=16"
  "A_WR=8,A_RM=7,A_WC=16,A_RN=7,A_KC=32|B_KC=56|C_WR=16,C_RM=7,C_WC=8,C_RN=8,C_KC=28"
  "A_WR=8,A_RM=14,A_WC=16,A_RN=7,A_KC=16|B_J=8,B_WR=32,B_RM=4,B_WC=8,B_RN=1|C_WR=16,C_RM=7,C_WC=8,C_RN=8,C_KC=8"
  "A_WR=14,A_RM=8,A_WC=16,A_RN=7,A_KC=16|B_J=24,B_WR=64,B_RM=2,B_WC=4,B_RN=6|C_WR=28,C_RM=4,C_WC=8,C_RN=8,C_KC=16"
  "A_WR=8,A_RM=7,A_WC=8,A_RN=7,A_KC=16||C_WR=16,C_RM=7,C_WC=8,C_RN=13,C_KC=16"
  "A_WR=8,A_RM=7,A_WC=8,A_RN=7,A_KC=64||C_WR=16,C_RM=7,C_WC=8,C_RN=15,C_KC=16"
  "A_WR=16,A_RM=7,A_WC=32,A_RN=7,A_KC=16||C_WR=16,C_RM=7,C_WC=32,C_RN=4,C_KC=16"
  "A_WR=4,A_RM=14,A_WC=16,A_RN=7,A_KC=32||C_WR=8,C_RM=7,C_WC=16,C_RN=8,C_KC=16"
  "A_WR=8,A_RM=7,A_WC=32,A_RN=7,A_KC=16||C_WR=16,C_RM=7,C_WC=8,C_RN=5,C_KC=16"
  "A_WR=16,A_RM=7,A_WC=8,A_RN=14,A_KC=16||C_WR=16,C_RM=7,C_WC=16,C_RN=8,C_KC=8"
  "A_WR=16,A_RM=7,A_WC=16,A_RN=7,A_KC=8||C_WR=16,C_RM=7,C_WC=8,C_RN=8,C_KC=56"
  "A_WR=8,A_RM=14,A_WC=8,A_RN=14,A_KC=16||C_WR=8,C_RM=14,C_WC=8,C_RN=8,C_KC=16"
  "A_WR=16,A_RM=7,A_WC=8,A_RN=7,A_KC=16||C_WR=16,C_RM=7,C_WC=16,C_RN=4,C_KC=28"
  "A_WR=16,A_RM=7,A_WC=16,A_RN=7,A_KC=48||C_WR=16,C_RM=7,C_WC=8,C_RN=13,C_KC=28"
  "A_WR=4,A_RM=7,A_WC=8,A_RN=7,A_KC=32||C_WR=16,C_RM=7,C_WC=8,C_RN=8,C_KC=16"
  "A_WR=8,A_RM=7,A_WC=4,A_RN=7,A_KC=32||"
)
# (Phase A skips the tiles strictly below the diagonal of A_f: 1 of 8 at 56x56, 2 of 16 at 28x56 and 56x28,
# none when one row tile spans D.)
# Backward: "grams part|frames part" (CAMDELTA_SCAN_BWD_TILES fragments). The library's choice: grams RPT=8
# (14x14 = 196 items, 8x8 blocks) TSG=32; frames DPT=16 TL=32 TPT=2 MC=16 (224 items, 64 tokens).
BWD=(
  "|"
  "RPT=4,TSG=32|DPT=8,TL=32,TPT=2,MC=16"
  "RPT=4,TSG=16|DPT=8,TL=16,TPT=4,MC=16"
  "RPT=8,TSG=16|DPT=16,TL=64,TPT=1,MC=16"
  "RPT=8,TSG=8|DPT=16,TL=32,TPT=1,MC=16"
  "RPT=16,TSG=32|DPT=16,TL=32,TPT=1,MC=28"
  "RPT=16,TSG=16|DPT=28,TL=32,TPT=2,MC=16"
  "RPT=4,TSG=8|DPT=28,TL=64,TPT=1,MC=16"
  "RPT=16,TSG=8|DPT=8,TL=32,TPT=1,MC=28"
  "RPT=8,TSG=48|DPT=4,TL=32,TPT=2,MC=8"
  "|DPT=16,TL=32,TPT=2,MC=8"
  "|DPT=8,TL=64,TPT=1,MC=16"
  "|DPT=8,TL=16,TPT=2,MC=16"
  "|DPT=56,TL=32,TPT=1,MC=16"
  "|DPT=28,TL=32,TPT=1,MC=28"
)

# ------------------------------------------------------------------------------------------------ runner
# medians KERNEL... < stderr-log: prints one median (ms) per kernel, "-" when it never ran.
medians() {
  awk -v want="$*" '
    $1 == "camdelta" && $2 == "kernel" { n[$3]++; x[$3, n[$3]] = $4 + 0 }
    END {
      k = split(want, names, " ")
      for (i = 1; i <= k; i++) {
        m = n[names[i]] + 0
        if (m == 0) { printf " -"; continue }
        for (a = 2; a <= m; a++) { v = x[names[i], a]; for (b = a - 1; b >= 1 && x[names[i], b] > v; b--)
          x[names[i], b + 1] = x[names[i], b]; x[names[i], b + 1] = v }
        med = (m % 2) ? x[names[i], (m + 1) / 2] : 0.5 * (x[names[i], m / 2] + x[names[i], m / 2 + 1])
        printf " %.4f", med
      }
    }'
}

declare -A BEST_MS BEST_SET BASE_MS
# sweep LABEL OP ENVVAR "kernel:part-index ..." CANDIDATES...
sweep() {
  local label=$1 op=$2 var=$3 spec=$4
  shift 4
  local kernels=() parts=() ks
  for ks in $spec; do kernels+=("${ks%%:*}"); parts+=("${ks##*:}"); done
  printf '\n== %s (%s, shape %s): median ms per kernel\n' "$label" "$op" "$SHAPE"
  printf '%-6s' "#"; printf ' %-18s' "${kernels[@]}"; printf '  %s\n' "$var"
  local i=0 cand
  for cand in "$@"; do
    local tag="$label-$i" tiles
    tiles=$(tr '|' ',' <<<"$cand" | sed -e 's/,,*/,/g' -e 's/^,//' -e 's/,$//')
    if [ "$SECONDS" -ge "$BUDGET" ]; then
      printf '%-6s SKIP (time budget %ss reached)  %s\n' "$tag" "$BUDGET" "${tiles:-(default)}"
      i=$((i + 1)); continue
    fi
    local log="$OUT/tune/$tag"
    env "$var=$tiles" CAMDELTA_DEVICE=$DEVICE CAMDELTA_PROFILE_KERNELS=1 CAMDELTA_SCAN_VERBOSE=1 \
      timeout 45 "$CLI" bench --shape "$SHAPE" --reps 3 --warmup 1 --only "$op" >"$log.out" 2>"$log.err"
    local rc=$?
    local meds
    meds=$(medians "${kernels[@]}" <"$log.err")
    if [ $rc -ne 0 ] || grep -q ' n/a ' "$log.out" || [[ "$meds" == *-* ]]; then
      local why
      why=$(cat "$log.out" "$log.err" | grep -v '^camdelta kernel' |
        grep -iE 'n/a|error|fail|unsupported|rejected|exceed' | head -2 | tr '\n' ' ' | cut -c1-220)
      [ $rc -eq 124 ] && why="timeout (45 s) $why"
      printf '%-6s FAIL rc=%d %s  %s\n' "$tag" "$rc" "${why:-no kernel timings}" "${tiles:-(default)}"
      i=$((i + 1)); continue
    fi
    local -a m=($meds)
    printf '%-6s' "$tag"; printf ' %-18s' "${m[@]}"; printf '  %s\n' "${tiles:-(default)}"
    local j
    for j in "${!kernels[@]}"; do
      local kname=${kernels[$j]} part
      if [ "${parts[$j]}" = "x" ]; then part=$tiles; else part=$(cut -d'|' -f"$((parts[j] + 1))" <<<"$cand"); fi
      [ -z "$part" ] && part="(default)"
      if [ -z "${BEST_MS[$kname]:-}" ] || awk -v a="${m[$j]}" -v b="${BEST_MS[$kname]}" 'BEGIN{exit !(a < b)}'; then
        BEST_MS[$kname]=${m[$j]}; BEST_SET[$kname]="$part  (run $tag)"
      fi
      [ "$i" -eq 0 ] && [ -z "$tiles" ] && BASE_MS[$kname]=${m[$j]}
    done
    i=$((i + 1))
  done
}

want_fwd=1 want_bwd=1
if [ $# -gt 0 ]; then
  want_fwd=0 want_bwd=0
  for a in "$@"; do
    case "$a" in fwd) want_fwd=1 ;; bwd) want_bwd=1 ;; *) echo "unknown argument $a"; exit 2 ;; esac
  done
fi
{
  [ $want_fwd = 1 ] && sweep fwd "scan-forward chunkwise causal" CAMDELTA_SCAN_TILES \
    "cd_scan_phase_a:0 cd_scan_phase_b:1 cd_scan_phase_c:2" "${FWD[@]}"
  [ $want_bwd = 1 ] && sweep bwd "scan-backward causal" CAMDELTA_SCAN_BWD_TILES \
    "cd_scan_bwd_grams:0 cd_scan_bwd_chain:x cd_scan_bwd_frames:1 cd_scan_bwd_ddecay:x" "${BWD[@]}"
  printf '\n== best per kernel (median ms, speed-up over the default run, the setting that kernel ran with)\n'
  for kname in cd_scan_phase_a cd_scan_phase_b cd_scan_phase_c cd_scan_bwd_grams cd_scan_bwd_chain \
    cd_scan_bwd_frames cd_scan_bwd_ddecay; do
    [ -z "${BEST_MS[$kname]:-}" ] && continue
    gain=$(awk -v a="${BASE_MS[$kname]:-0}" -v b="${BEST_MS[$kname]}" \
      'BEGIN { if (a > 0 && b > 0) printf "x%.2f", a / b }')
    printf '%-20s %9s %6s  %s\n' "$kname" "${BEST_MS[$kname]}" "$gain" "${BEST_SET[$kname]}"
  done
  printf 'elapsed %ds\n' "$SECONDS"
} 2>&1 | tee "$OUT/tune/summary.txt"
