/* camdelta_warm / camdelta_warm_shape: every operation builds (or loads from the disk cache) the programs its calls
 * would use, so that later calls never compile. The operations are asked in turn, from one table. */
#include "ops/backward.h"
#include "ops/camera_op.h"
#include "scan/engine.h"
#include "runtime/internal.h"
#include "ops/prep_common.h"

/* What to warm: head dim D; for camdelta_warm_shape also B·H = BH, H and S (0 for camdelta_warm, which knows the head
 * dim only: the operations whose programs depend on the shape skip it). */
typedef struct warm_for {
  size_t BH, H, D, S;
} warm_for;

static camdelta_status prep_forward(camdelta_context *ctx, const warm_for *w) {
  camdelta_status st = CAMDELTA_OK;
  for (int dt = 0; dt < 3 && !st; dt++) st = cd_prep_forward_warm(ctx, (camdelta_dtype)dt, w->D, w->H);
  return st;
}

static camdelta_status prep_backward(camdelta_context *ctx, const warm_for *w) {
  camdelta_status st = CAMDELTA_OK;
  for (int dt = 0; dt < 3 && !st; dt++) st = cd_prep_backward_warm(ctx, (camdelta_dtype)dt, w->D);
  return st;
}

static camdelta_status scan_backward(camdelta_context *ctx, const warm_for *w) {
  return cd_scan_backward_warm(ctx, w->D);
}

/* the camera branch's own programs */
static camdelta_status branch(camdelta_context *ctx, const warm_for *w) {
  return w->S ? cd_branch_warm(ctx, w->D) : CAMDELTA_OK;
}

/* the branch's fused scan pair (src/scan/pair.c) */
static camdelta_status scan_pair(camdelta_context *ctx, const warm_for *w) {
  return w->S ? cd_scan_pair_warm(ctx, w->BH, w->D, w->S) : CAMDELTA_OK;
}

static camdelta_status scan_forward(camdelta_context *ctx, const warm_for *w) {
  return w->S ? cd_scan_warm(ctx, w->BH, w->D, w->S) : CAMDELTA_OK;
}

static camdelta_status (*const OPS[])(camdelta_context *, const warm_for *) = {
    prep_forward, prep_backward, scan_backward, branch, scan_pair, scan_forward,
};

static camdelta_status warm_all(camdelta_context *ctx, const warm_for *w) {
  camdelta_status st = CAMDELTA_OK;
  for (size_t i = 0; i < sizeof OPS / sizeof OPS[0] && !st; i++) st = OPS[i](ctx, w);
  return st;
}

camdelta_status camdelta_warm(camdelta_context *ctx) {
  cd_clear_error();
  if (!ctx) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_warm: 'ctx' is NULL");
  for (size_t D = 8; D <= 128; D += 8) {
    const warm_for w = {.BH = 0, .H = 0, .D = D, .S = 0};
    camdelta_status st = warm_all(ctx, &w);
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
  size_t tok;
  if (!cd_mul(&BH, B, H) || !CD_PROD(&tok, BH, D, S, sizeof(float)))
    return cd_fail(CAMDELTA_ERROR_OVERFLOW, "%s: B*H*D*S floats overflow size_t", op);
  /* the scan's limit, checked before anything is built */
  if (S > UINT32_MAX) return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: S=%zu exceeds the scan's limit 2^32-1", op, S);
  const warm_for w = {.BH = BH, .H = H, .D = D, .S = S};
  return warm_all(ctx, &w);
}
