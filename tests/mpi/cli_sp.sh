#!/usr/bin/env bash
# The tool's sequence-parallel modes under mpirun (docs/parallel.md):
#   `mpirun -np P camdelta run scan|scan-backward --sequence-parallel` writes the same files as one device
#   (within 1e-6 relative), both directions, F not divisible by P; so does `run branch|branch-backward`; `demo --sequence-parallel` passes
#   (the scans and the camera branch);
#   `bench --sequence-parallel` reports the compute, wait and exchange time per rank (scans and the branch); bad
#   use is refused clearly.
# Usage: cli_sp.sh CAMDELTA NPY_TOOL MPIEXEC WORKDIR [mpirun flags...]
set -euo pipefail
cli=$1 tool=$2 mpiexec=$3 work=$4
shift 4
flags=("$@")
rm -rf "$work" && mkdir -p "$work"
in="$work/in"
mkdir -p "$in"
"$tool" gen "$in" 1 2 16 7 5 3   # B H D F S seed: F = 7 frames

for P in 2 3; do
  for dir in causal reverse; do
    rev=(); [ $dir = reverse ] && rev=(--reverse)
    one="$work/one-$dir" sp="$work/sp$P-$dir"
    "$cli" run scan --in "$in" --out "$one" "${rev[@]}" --final-state --algorithm sequential --quiet
    "$mpiexec" -np $P "${flags[@]}" "$cli" run scan --in "$in" --out "$sp" "${rev[@]}" --final-state \
      --algorithm sequential --sequence-parallel
    "$tool" cmp "$sp" "$one" 1e-6 out final_state
    "$cli" run scan-backward --in "$in" --out "$one-b" "${rev[@]}" --quiet
    "$mpiexec" -np $P "${flags[@]}" "$cli" run scan-backward --in "$in" --out "$sp-b" "${rev[@]}" --sequence-parallel
    "$tool" cmp "$sp-b" "$one-b" 1e-6 dq dk dv dbeta ddecay dinit_state
  done
done

# the whole camera branch: T = 7 frames, chunk size 3 (the chunk [3, 7) straddles ranks), forward and backward
bin="$work/branch-in"
mkdir -p "$bin"
"$tool" genbranch "$bin" 1 7 2 3 2 16 5   # B T Hs Ws H D seed
bopts=(--grid 7,2,3 --chunk-size 3 --algorithm sequential)
"$cli" run branch --in "$bin" --out "$work/b-one" "${bopts[@]}" --quiet
"$cli" run branch-backward --in "$bin" --out "$work/bb-one" "${bopts[@]}" --quiet
for P in 2 3; do
  "$mpiexec" -np $P "${flags[@]}" "$cli" run branch --in "$bin" --out "$work/b-sp$P" "${bopts[@]}" --sequence-parallel
  "$tool" cmp "$work/b-sp$P" "$work/b-one" 1e-6 y
  "$mpiexec" -np $P "${flags[@]}" "$cli" run branch-backward --in "$bin" --out "$work/bb-sp$P" "${bopts[@]}" \
    --sequence-parallel --quiet
  "$tool" cmp "$work/bb-sp$P" "$work/bb-one" 1e-6 dq_raw dk_raw dv_raw dconv_weight dq_norm_weight dk_norm_weight \
    dbeta ddecay
done

# the demo checks every rank against one device and must say so
"$mpiexec" -np 3 "${flags[@]}" "$cli" demo --sequence-parallel --shape 1,2,16,5,6 | tee "$work/demo.txt"
grep -q "largest difference against one device: .*PASS" "$work/demo.txt"
test "$(grep -c '^causal ' "$work/demo.txt")" = 3   # one line per rank
test "$(grep -c '^branch ' "$work/demo.txt")" = 3   # the camera branch too, one line per rank

# the bench reports the time per rank and the exchange
"$mpiexec" -np 2 "${flags[@]}" "$cli" bench --sequence-parallel --shape 1,2,16,4,8 --reps 2 --warmup 1 \
  --json "$work/bench.json" | tee "$work/bench.txt"
grep -q "exchange" "$work/bench.txt"
test "$(grep -c '^scan forward causal  *[01] ' "$work/bench.txt")" = 2
grep -q '"exchange_ms"' "$work/bench.json"
grep -q '"wait_ms"' "$work/bench.json"
grep -q '"compute_ms"' "$work/bench.json"
# compute, wait and exchange per rank for the scans and the branch, beside one device
grep -q "compute  *wait  *exchange" "$work/bench.txt"
test "$(grep -c '^branch forward  *[01] ' "$work/bench.txt")" = 2
test "$(grep -c '^branch backward  *[01] ' "$work/bench.txt")" = 2
grep -q '^branch backward  *one ' "$work/bench.txt"

# more ranks than frames: a clear input error (exit 3) and nothing written
mkdir -p "$work/few"
"$tool" gen "$work/few" 1 1 8 2 3 1
set +e
"$mpiexec" -np 3 "${flags[@]}" "$cli" run scan --in "$work/few" --out "$work/none" --sequence-parallel 2>"$work/err.txt"
rc=$?
set -e
cat "$work/err.txt"
test $rc -ne 0
grep -q "cannot be split over 3 ranks" "$work/err.txt"
test ! -e "$work/none"
# --help after the operation prints the usage of run; a prep option on the scan over ranks is refused, nothing written
for form in "run scan --sequence-parallel --help" "run branch-backward --sequence-parallel -h"; do
  # shellcheck disable=SC2086
  "$cli" $form >"$work/help.txt"
  grep -q "usage: camdelta run OP" "$work/help.txt"
done
set +e
"$mpiexec" -np 2 "${flags[@]}" "$cli" run scan --in "$in" --out "$work/none" --sequence-parallel --k-scale 0.5 \
  2>"$work/err.txt"
rc=$?
set -e
test $rc -eq 2
grep -q "k-scale and --norm-eps apply to branch" "$work/err.txt"
test ! -e "$work/none"

# packed clips are not split over ranks: said so (exit 3), nothing written
mkdir -p "$work/packed"
cp "$in"/*.npy "$work/packed/"
cp "$in/decay.npy" "$work/packed/frame_offsets.npy"
set +e
"$mpiexec" -np 2 "${flags[@]}" "$cli" run scan --in "$work/packed" --out "$work/none" --sequence-parallel \
  2>"$work/err.txt"
rc=$?
set -e
test $rc -ne 0
grep -q "packed clips are not supported over ranks" "$work/err.txt"
test ! -e "$work/none"

# outputs all or nothing over ranks too (rank 0 commits the gathered set, tools/cli_outset.h): a failing rename rolls
# the renamed outputs back; a kill between renames is rolled back by the next set on the folder
faults=${CAMDELTA_CLI_FAULTS:?the fault-injection build of the tool (tests/CMakeLists.txt)}
names=(dq dk dv dbeta ddecay dinit_state)
sp="$work/sp-commit"
"$mpiexec" -np 2 "${flags[@]}" "$cli" run scan-backward --in "$in" --out "$sp" --sequence-parallel --quiet
rm -rf "$work/sp-keep" && cp -r "$sp" "$work/sp-keep"
same_as_keep() { for n in "${names[@]}"; do cmp -s "$sp/$n.npy" "$work/sp-keep/$n.npy" || return 1; done; }
leftovers() { ls -A "$sp" | grep -c -E '\.cdtmp\.|\.cdold\.|^\.camdelta-commit\.|\.tmp\.' || true; }
set +e
"$mpiexec" -np 2 -x CAMDELTA_FAULT=rename:3 "${flags[@]}" "$faults" run scan-backward --in "$in" --out "$sp" \
  --reverse --sequence-parallel 2>"$work/err.txt"
rc=$?
set -e
test $rc -ne 0
grep -q "cannot replace: .*2 outputs already renamed restored" "$work/err.txt"
same_as_keep
test "$(leftovers)" = 0
set +e
"$mpiexec" -np 2 -x CAMDELTA_FAULT=kill:4 "${flags[@]}" "$faults" run scan-backward --in "$in" --out "$sp" \
  --reverse --sequence-parallel --quiet 2>"$work/err.txt"
rc=$?
set -e
test $rc -ne 0
test "$(leftovers)" -gt 0   # the killed commit's journal, kept files and temporary files
if same_as_keep; then echo "cli_sp: kill:4 left the previous set whole (expected a mixed set)"; exit 1; fi
"$mpiexec" -np 2 "${flags[@]}" "$cli" run scan-backward --in "$in" --out "$sp" --reverse --sequence-parallel --quiet
"$tool" cmp "$sp" "$work/one-reverse-b" 1e-6 "${names[@]}"
test "$(leftovers)" = 0
echo "cli_sp: all checks passed"
