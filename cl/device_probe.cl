/* Device feature tests run once per context (src/runtime/loops.c).
 *
 * cd_probe_loops: one work-item runs n steps of a linear congruential generator in one loop and writes the last
 * value, from which the host tells how many steps ran. Mesa's gallivm (llvmpipe, which Rusticl and lavapipe run on)
 * counts every loop iteration of a shader invocation against one limit (65535) and ends every loop of that
 * invocation once it is spent, without any error: the kernel then completes with wrong results. */
kernel void cd_probe_loops(global uint *out, uint n) {
  uint s = 1u;
  for (uint i = 0; i < n; i++) s = s * 1664525u + 1013904223u;
  out[0] = s;
}
