# Groups `camdelta bench` output run with CAMDELTA_PROFILE_KERNELS=1 (stdout and stderr together) by operation:
# every "camdelta kernel NAME  T ms" line before an operation's row belongs to that row. Prints, per row, each
# kernel's time per call of the operation (its launches summed, divided by the number of calls profiled, which is
# how often the row's first kernel ran) and their total. Variable s: a label (the shape).
/^camdelta kernel/ {
  k = substr($0, 17, 40); sub(/ +$/, "", k)
  if (!(k in t)) order[++nk] = k
  t[k] += $(NF - 1); c[k]++
  next
}
nk > 0 && /^[a-z]/ {
  row = $0; sub(/ +[0-9].*$/, "", row)
  calls = c[order[1]]; total = 0
  printf "%s %s (%d calls profiled)\n", s, row, calls
  for (i = 1; i <= nk; i++) { printf "  %-40s %9.4f ms\n", order[i], t[order[i]] / calls; total += t[order[i]] / calls }
  printf "  %-40s %9.4f ms\n", "total", total
  delete t; delete c; delete order; nk = 0
}
