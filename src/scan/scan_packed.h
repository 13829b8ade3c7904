/* Packed clips (SPEC section 9): what scan_packed.c hands to the native packed launches in scan.c and
 * scan_backward.c (the kernels' CD_PACKED variant, cl/common.cl). Internal. */
#ifndef CAMDELTA_SCAN_PACKED_H
#define CAMDELTA_SCAN_PACKED_H

#include "internal.h"

typedef struct cd_packed_run {
  cl_mem pk;    /* device int64: F + 1 frame offsets, F frame words (clip·4·H + first + 2·last), clips + 1 clip
                   offsets (cl/common.cl) */
  size_t clips; /* number of clips */
  size_t N;     /* packed tokens */
  int vec;      /* every frame offset and N are multiples of 4 (16-byte token rows for the tensor-core loads) */
  int uniform;  /* every frame has the same token count (the kernels' CD_PACKED=2 variant) */
  int in_const; /* the table fits in 64 KiB (the OpenCL minimum constant buffer): a __constant argument */
} cd_packed_run;

/* The kernels' build options for this run: " -DCD_PACKED=1|2" and " -DCD_PK_CONST=1" when in_const. */
const char *cd_packed_opts(const cd_packed_run *pr);

/* Chunkwise forward over packed clips: args has B = 1, F = all frames, S = the longest frame; buffers and offsets
 * checked by the caller. A saved object gets the states (H, F, D, D) by packed frame, marked by S = 0. */
camdelta_status cd_scan_forward_native(camdelta_context *ctx, const camdelta_scan_args *args, const cd_packed_run *pr,
                                       camdelta_scan_saved *saved);

/* Backward over packed clips (same conventions); saved NULL (recompute) or from cd_scan_forward_native. */
camdelta_status cd_scan_backward_native(camdelta_context *ctx, const camdelta_scan_backward_args *args,
                                        const cd_packed_run *pr, const camdelta_scan_saved *saved);

#endif
