/* camdelta_warm: build every program ahead of time. */
#include "internal.h"
#include "prep_common.h"

camdelta_status camdelta_warm(camdelta_context *ctx) {
  cd_clear_error();
  if (!ctx) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_warm: 'ctx' is NULL");
  for (int dt = 0; dt < 3; dt++) {
    for (size_t D = 8; D <= 128; D += 8) {
      cl_kernel k;
      size_t ts;
      camdelta_status st = cd_prep_kernel(ctx, "prep.cl", "cd_prep_forward", (camdelta_dtype)dt, D, &k, &ts);
      if (st) return st;
      clReleaseKernel(k);
    }
  }
  return CAMDELTA_OK;
}
