/* The prep backward's hook for camdelta_warm (src/ops/warm.c). Not installed. */
#ifndef CAMDELTA_BACKWARD_H
#define CAMDELTA_BACKWARD_H
#include "runtime/internal.h"

/** Build (or load) the prep-backward kernels for (dtype, D), as a call would. */
camdelta_status cd_prep_backward_warm(camdelta_context *ctx, camdelta_dtype dtype, size_t D);
#endif
