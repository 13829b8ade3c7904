/* PLACEHOLDER (replaced within this session by the real implementation). */
#include "internal.h"

camdelta_status camdelta_prep_backward(camdelta_context *ctx, const camdelta_prep_backward_args *args, const camdelta_prep_saved *saved) {
  (void)ctx, (void)args, (void)saved;
  return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "camdelta_prep_backward: not implemented yet");
}
