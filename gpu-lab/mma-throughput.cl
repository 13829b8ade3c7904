/* The tensor cores' rate for the scan's instruction (gpu-lab/mma-throughput.c, `gpu-lab/gpu-test.sh mma`): every warp runs
 * `iters` rounds of NCH independent mma.sync.m16n8k8 TF32 products (NCH accumulator chains), nothing else. */
#ifndef NCH
#define NCH 8
#endif
#define MMA(c, a, b)                                                                                           \
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "     \
               "{%0,%1,%2,%3};"                                                                                \
               : "+f"((c)[0]), "+f"((c)[1]), "+f"((c)[2]), "+f"((c)[3])                                        \
               : "r"((a)[0]), "r"((a)[1]), "r"((a)[2]), "r"((a)[3]), "r"((b)[0]), "r"((b)[1]))
__kernel void mma_throughput(__global float *out, int iters, float seed) {
  uint a[4], b[2];
  for (int i = 0; i < 4; i++) a[i] = as_uint(seed * (i + 1) + get_local_id(0));
  for (int i = 0; i < 2; i++) b[i] = as_uint(seed * (i + 7));
  float c[NCH][4];
  for (int j = 0; j < NCH; j++)
    for (int e = 0; e < 4; e++) c[j][e] = 0.0f;
  for (int it = 0; it < iters; it++) {
#pragma unroll
    for (int j = 0; j < NCH; j++) MMA(c[j], a, b);
  }
  float s = 0.0f;
  for (int j = 0; j < NCH; j++)
    for (int e = 0; e < 4; e++) s += c[j][e];
  out[get_global_id(0)] = s; /* keeps the products */
}
