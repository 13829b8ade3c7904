/* camdelta_warm / camdelta_warm_shape: build (or load from the disk cache)
 * the programs the operations use, so that later calls never compile. */
#include "backward.h"
#include "camera_op.h"
#include "internal.h"
#include "prep_common.h"
#include "scan_pair.h"
#include "scan_warm.h"

/* Programs that depend on the head dim (and, for the register-resident prep forward, on the head count H; 0 when
 * camdelta_warm does not know it). */
static camdelta_status warm_head_dim(camdelta_context *ctx, size_t D, size_t H) {
  camdelta_status st = CAMDELTA_OK;
  for (int dt = 0; dt < 3 && !st; dt++) {
    cl_kernel k;
    size_t ts;
    cd_pf_plan pf;
    /* the register-resident form in both index widths (a call's N decides which, cd_prep_ix32); the other forms do
     * not take the flag, so the second call finds the first one's program */
    int fused = 0;
    for (int ix = 0; ix < 2 && !st; ix++)
      if ((fused = cd_prep_fused_kernel(ctx, (camdelta_dtype)dt, D, H, ix, &pf, &st))) clReleaseKernel(pf.k);
    if (st) break;
    if (!fused && !(st = cd_prep_kernel(ctx, "prep.cl", "cd_prep_forward", (camdelta_dtype)dt, D, &k, &ts)))
      clReleaseKernel(k);
    if (!st) st = cd_prep_inv_rms_warm(ctx, (camdelta_dtype)dt);
    if (!st) st = cd_prep_backward_warm(ctx, (camdelta_dtype)dt, D);
  }
  if (!st) st = cd_scan_backward_warm(ctx, D);
  return st;
}

camdelta_status camdelta_warm(camdelta_context *ctx) {
  cd_clear_error();
  if (!ctx) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_warm: 'ctx' is NULL");
  for (size_t D = 8; D <= 128; D += 8) {
    camdelta_status st = warm_head_dim(ctx, D, 0);
    if (st) return st;
  }
  return CAMDELTA_OK;
}

camdelta_status camdelta_warm_shape(camdelta_context *ctx, size_t B, size_t H, size_t D, size_t S) {
  static const char *op = "camdelta_warm_shape";
  cd_clear_error();
  if (!ctx) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'ctx' is NULL", op);
  camdelta_status st = cd_check_head_dim(op, D);
  if (st) return st;
  size_t BH;
  if (!B || !H || !S) return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: B=%zu, H=%zu, S=%zu: each must be at least 1", op, B, H, S);
  if (!cd_mul(&BH, B, H)) return cd_fail(CAMDELTA_ERROR_OVERFLOW, "%s: B*H overflows size_t", op);
  if ((st = warm_head_dim(ctx, D, H))) return st;
  if ((st = cd_branch_warm(ctx, D))) return st; /* the camera branch's own programs */
  if ((st = cd_scan_pair_warm(ctx, BH, D, S))) return st; /* its fused scan pair (src/ops/scan_pair.c) */
  return cd_scan_warm(ctx, BH, D, S);
}
