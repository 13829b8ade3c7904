/*
 * camdelta — the scan over packed clips (docs/math.md §9): a batch of clips of different lengths and resolutions
 * packed along one token axis (B = 1). Part of the core library; includes camdelta.h.
 *
 * Layouts: q k v out (1, H, D, N) and grad_out, dq, dk, dv likewise; beta, dbeta (1, H, N) per token; decay,
 * ddecay (1, H, F) per frame; init_state, final_state, grad_final_state, dinit_state (clips, H, D, D), one per
 * clip. Frame f holds tokens [frame_offsets[f], frame_offsets[f+1]); clip c holds frames
 * [clip_offsets[c], clip_offsets[c+1]); frames may have any token counts. The scan restarts at every clip (or
 * loads that clip's init_state), writes one final_state per clip, and the reverse direction stops at clip ends:
 * the results equal running each clip alone.
 *
 * The calls take the usual argument structs with B = 1, S = 0 and F = the total number of frames, plus the
 * offsets; everything else (direction, algorithm, optional states, saved objects, profile) as for one clip.
 * Bad offsets (not starting at 0, not increasing, not ending at N and F) are rejected before anything is
 * written.
 */
#ifndef CAMDELTA_PACKED_H
#define CAMDELTA_PACKED_H

#include "camdelta.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct camdelta_packed_clips {
  const int64_t *frame_offsets; /* host, F + 1 token offsets: 0, ..., N */
  const int64_t *clip_offsets;  /* host, clips + 1 frame offsets: 0, ..., F */
  size_t clips;                 /* number of clips */
  size_t tokens;                /* N, the packed token count */
  int *native;                  /* optional out: 1 when the call ran the native packed kernels, 0 when it ran the
                                   clips as a padded fixed-shape batch (see below) */
} camdelta_packed_clips;

/** Scan forward over packed clips. The chunkwise algorithm runs natively on the packed layout (the kernels read the
 *  offsets; all clips and frames in parallel, no copies); the sequential algorithm runs the clips as a padded
 *  fixed-shape batch (clips, most frames of a clip, most tokens of a frame). `saved` may be NULL; a saved object
 *  filled here goes to camdelta_scan_backward_packed with the same clips (its states: native (H, F, D, D) by
 *  packed frame; padded (clips, H, most frames of a clip, D, D)). */
CAMDELTA_API camdelta_status camdelta_scan_forward_packed(camdelta_context *ctx, const camdelta_scan_args *args,
                                                          const camdelta_packed_clips *clips,
                                                          camdelta_scan_saved *saved);

/** Scan backward over packed clips: native, except with the saved object of a padded (sequential) forward. */
CAMDELTA_API camdelta_status camdelta_scan_backward_packed(camdelta_context *ctx,
                                                           const camdelta_scan_backward_args *args,
                                                           const camdelta_packed_clips *clips,
                                                           const camdelta_scan_saved *saved);

#ifdef __cplusplus
}
#endif
#endif /* CAMDELTA_PACKED_H */
