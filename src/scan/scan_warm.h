/* The scan forward's hook for camdelta_warm (src/ops/warm.c). Not installed. */
#ifndef CAMDELTA_SCAN_WARM_H
#define CAMDELTA_SCAN_WARM_H
#include "internal.h"

/** Build (or load) both scan-forward algorithms' kernels as a call with
 *  B*H = BH, head dim D and S tokens per frame would (their tiles depend on
 *  all three). */
camdelta_status cd_scan_warm(camdelta_context *ctx, size_t BH, size_t D, size_t S);
#endif
