/* The camera branch on one block of a stream (src/ops/stream.c): the branch's run (src/ops/branch.c) on the frames
 * [f0, f0 + T) of an open-ended sequence whose earlier frames are summarised by a causal state and the conv's
 * look-back. Not installed. */
#ifndef CAMDELTA_BRANCH_BLOCK_H
#define CAMDELTA_BRANCH_BLOCK_H
#include "camdelta_phases.h"
#include "runtime/internal.h"

/** The block's frames are [f0, f0 + args->T): one conv segment (its look-back reads `lookback`, its look-ahead
 *  stops at the block's end) and one scan chunk (the causal scan starts from `init`, the reverse scan restarts at
 *  the block's first frame when f0 > 0 or the block is one frame). */
typedef struct cd_branch_block {
  size_t f0;                /* absolute index of the block's first frame (< 2^32 - T) */
  camdelta_buffer lookback; /* (B, 3, S, C) in args->dtype: raw K of frames f0-3, f0-2, f0-1 (slots of frames < 0
                               unread) */
  camdelta_buffer init;     /* (B, H, D, D) f32: the causal state after frame f0 - 1; absent: zero (f0 = 0) */
  camdelta_buffer final;    /* (B, H, D, D) f32: receives the causal state after the block's last frame */
  camdelta_buffer lookback_out; /* absent, or (B, 3, S, C) in args->dtype (not lookback): receives the raw K
                                   of the last three frames up to the block's end (slots of frames < 0 unwritten) */
  cl_mem mask;              /* T uint32: cd_branch_block_masks' mask */
  cl_mem seg_end;           /* min(f0, 3) + T uint32: cd_branch_block_masks' seg_end */
} cd_branch_block;

/** The block's reverse-scan mask (T entries) and conv segment ends (min(f0, 3) + T entries, relative to frame
 *  f0 - min(f0, 3)) that cd_branch_block's mask and seg_end hold on the device. */
void cd_branch_block_masks(size_t f0, size_t T, uint32_t *mask, uint32_t *seg_end);

/** Starts the branch forward on a block: the checks of camdelta_branch_forward on `args` (args->T = the block's
 *  frames; its chunking is unused), the branch plan acquired; nothing enqueued. `op` begins the messages. The run
 *  (camdelta_branch_run_next, then camdelta_branch_run_destroy) needs nothing of its caller. *run is NULL on
 *  failure. */
camdelta_status cd_branch_block_start(camdelta_context *ctx, const char *op, const camdelta_branch_args *args,
                                      const cd_branch_block *block, camdelta_branch_run **run);
#endif
