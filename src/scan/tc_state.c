/* The tensor-core path's state per context (tc.h, cd_tc_context): kept in one of the context's extension slots,
 * which the runtime allocates and frees without knowing its fields. Both the feature test (tc.c) and the tile
 * resolution (tc_params.c) reach it here, so that neither calls the other for it. */
#include "scan/tc.h"

static const cd_context_ext_kind tc_kind = {.size = sizeof(cd_tc_context), .fini = NULL};

cd_tc_context *cd_tc_context_of(camdelta_context *ctx) { return cd_context_ext(ctx, &tc_kind); }

const cd_tc_context *cd_tc_context_find(const camdelta_context *ctx) { return cd_context_ext_find(ctx, &tc_kind); }
