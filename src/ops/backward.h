/* The prep backward's hook for camdelta_warm (src/ops/warm.c), and which form it runs. Not installed. */
#ifndef CAMDELTA_BACKWARD_H
#define CAMDELTA_BACKWARD_H
#include "runtime/internal.h"

/** Build (or load) the prep-backward kernels for (dtype, D), as a call would. */
camdelta_status cd_prep_backward_warm(camdelta_context *ctx, camdelta_dtype dtype, size_t D);
/** 1 when ctx runs the prep backward in storage `dtype` (a storage code: cd_store_code) in its CPU form
 *  (cl/prep_cpu.cl cd_prep_bwd_cpu, option prep_backward FORM=2, and the driver has no loop budget), else 0. */
int cd_prep_backward_cpu_form(camdelta_context *ctx, camdelta_dtype dtype);
#endif
