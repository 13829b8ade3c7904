/* The scan's tile overrides, read from the option registry (src/options/table.c: families "chunkwise",
 * "backward", "sequential", "gram", "apply", "frames"): the environment as read at context creation, or
 * camdelta_tune_set. The registry checks each value's syntax and range; the kernels' own constraints are checked as
 * a plan is built, naming the value's source. (camdelta_tune_get describes these families in
 * tune_api.c.) */
#include <stdio.h>
#include <string.h>

#include "scan/tiles.h"

_Static_assert((int)CD_OPT_CHUNKWISE_KEYS == (int)CD_ST_COUNT, "the registry's chunkwise keys are the scan's");
_Static_assert((int)CD_OPT_BACKWARD_KEYS == (int)CD_SB_COUNT, "the registry's backward keys are the scan's");
_Static_assert((int)CD_OPT_SEQUENTIAL_KEYS == (int)CD_SQ_COUNT, "the registry's sequential keys are the scan's");
_Static_assert(CD_OPT_TC_APPLY - CD_OPT_TC_GRAM == 5 && CD_OPT_TC_FRAMES - CD_OPT_TC_APPLY == 5,
               "the tensor-core families' keys are WM WN MR NR KC");

int cd_scan_tile_values(const camdelta_context *ctx, cd_opt_id first, unsigned n, unsigned *v, char *var,
                        size_t var_size) {
  int any = 0;
  cd_opt_source_name(&ctx->opts, first, var, var_size);
  for (unsigned k = 0; k < n; k++) {
    const cd_opt_id id = (cd_opt_id)(first + k);
    const uint32_t x = cd_opt_get(&ctx->opts, id, 0, 0);
    v[k] = x == CD_OPT_AUTO ? 0 : (unsigned)x;
    if (v[k] && !any) cd_opt_source_name(&ctx->opts, id, var, var_size), any = 1;
  }
  return any;
}

cd_scan_override cd_scan_override_of(const unsigned v[CD_ST_COUNT]) {
  cd_scan_override o;
  memset(&o, 0, sizeof o);
  for (int i = 0; i < CD_ST_COUNT; i++) {
    o.v[i] = v[i];
    if (v[i]) *(i <= CD_ST_A_KC ? &o.a : i <= CD_ST_B_PF ? &o.b : &o.c) = 1;
  }
  return o;
}
