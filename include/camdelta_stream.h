/* camdelta streams: the camera branch (camdelta_branch_forward) run over a video one block of frames at a time,
 * block-autoregressively, with device memory independent of the video's length (docs/streaming.md).
 *
 * A stream holds, per (b, h), the causal scan's state M (D x D, f32) after the last committed frame, the raw K of
 * the last three committed frames (the short conv's look-back, in the activations' dtype) and f0, the number of
 * committed frames. A step runs the whole branch for exactly the next block of the stream's chunk schedule
 * (uniform: chunk_size frames each; first_frame: 1, then chunk_size; first_chunk_plus_one: chunk_size + 1, then
 * chunk_size): cameras at the absolute frame positions f0 ... f0 + Tb - 1, the conv over the block as one segment
 * reading the carried look-back, prep, the beta discount, the causal scan from M and the reverse scan within the
 * block, the output transform. A committing step then advances M, the look-back and f0; a step that does not
 * commit changes no bit of the stream (a diffusion model runs each block once per denoising step against the same
 * committed prefix, then commits once).
 *
 * Committing every block of T frames gives the y of camdelta_branch_forward over the T frames with the same chunk
 * schedule wherever that call's conv segments are its scan chunks (docs/math.md §8.2: T % chunk_size == 0 makes
 * them uniform), within docs/math.md §5's branch bound (§8.7's with 16-bit activations);
 * camdelta_ref_stream_forward (camdelta_ref.h) is the f64 reference of a stream in every case.
 *
 * Every call returns CAMDELTA_OK or the status named in its comment, with a message (camdelta_last_message); a
 * failed call changes nothing in the stream. A stream is used by one thread at a time. */
#ifndef CAMDELTA_STREAM_H
#define CAMDELTA_STREAM_H

#include "camdelta.h"

#ifdef __cplusplus
extern "C" {
#endif

/** A stream (opaque). */
typedef struct camdelta_stream camdelta_stream;

/** The configuration of a stream, fixed at creation. */
typedef struct camdelta_stream_args {
  size_t B, H, D;                      /* batch (B streams in lockstep), heads, head dim (as camdelta_branch_args) */
  size_t Hs, Ws;                       /* token grid of one frame: S = Hs * Ws tokens */
  size_t pt, ph, pw;                   /* patch, each >= 1 */
  size_t chunk_size;                   /* >= 1: the schedule's block length */
  camdelta_chunk_strategy strategy;    /* the schedule (docs/math.md §8.4) */
  float k_scale;                       /* typically D^-0.5 * S^-0.5 */
  float norm_eps;                      /* typically 1e-6 */
  camdelta_dtype dtype;                /* of q_raw, k_raw, v_raw, y and the look-back: f32, f16 or bf16 (f32
                                          arithmetic and states inside, docs/math.md §8.7) */
  camdelta_scan_algorithm algorithm;   /* of the scans; AUTO as camdelta_branch_forward decides it */
  camdelta_precision precision;        /* of the scans; zero = exact */
  camdelta_buffer conv_weight;         /* (C, 4) f32, C = H * D: copied at creation */
  camdelta_buffer q_norm_weight;       /* (C,) f32, copied */
  camdelta_buffer k_norm_weight;       /* (C,) f32, copied */
} camdelta_stream_args;

/** Creates a stream at frame 0 (zero state) on ctx. The weights are copied (the caller's buffers may be released
 *  afterwards). Returns INVALID_ARGUMENT (NULL argument, a buffer of another context, a non-finite k_scale or
 *  norm_eps, an unknown dtype, strategy, algorithm or precision), SHAPE (B, H, Hs, Ws, patch or chunk_size zero),
 *  OVERFLOW (sizes), BUFFER_TOO_SMALL (a weight buffer), UNSUPPORTED (D not a supported head dim, chunk_size past
 *  2^32 - 2), OUT_OF_MEMORY, OPENCL. *out is NULL on failure. */
CAMDELTA_API camdelta_status camdelta_stream_create(camdelta_context *ctx, const camdelta_stream_args *args,
                                                    camdelta_stream **out);
/** Releases the stream's device memory; NULL is a no-op. Destroy a stream before its context. */
CAMDELTA_API void camdelta_stream_destroy(camdelta_stream *stream);

/** One step's tensors: Tb = `frames` frames of S tokens, N = Tb * S. */
typedef struct camdelta_stream_step_args {
  size_t frames;                     /* Tb: must be camdelta_stream_next_frames(stream) */
  int commit;                        /* nonzero: advance the stream past this block */
  camdelta_buffer q_raw, k_raw, v_raw; /* (B, N, H, D) in the stream's dtype */
  camdelta_buffer camera_conditions; /* (B, Tb, 20) f32: the block's cameras (docs/math.md §8.1) */
  camdelta_buffer beta;              /* (B, H, Tb, S) f32 */
  camdelta_buffer decay;             /* (B, H, Tb) f32 */
  camdelta_buffer y;                 /* output (B, N, H, D) in the stream's dtype */
  camdelta_profile *profile;         /* optional: kernel time of this step */
} camdelta_stream_step_args;

/** Runs the branch for the stream's next block (enqueued on ctx's queue, as camdelta_branch_forward). `stream`
 *  must have been created on ctx. Returns INVALID_ARGUMENT (NULL argument, a stream of another context, a buffer
 *  of another context, an output overlapping an input, an infinite camera value), SHAPE (`frames` is not the
 *  schedule's next block: the message names the expected count), BUFFER_TOO_SMALL, UNSUPPORTED (the frame index
 *  would pass 2^32 - 1), OUT_OF_MEMORY, OPENCL. Reads camera_conditions back to the host first (as the branch
 *  does). After an error nothing of the stream has changed. */
CAMDELTA_API camdelta_status camdelta_stream_step(camdelta_context *ctx, camdelta_stream *stream,
                                                  const camdelta_stream_step_args *args);

/** The number of committed frames (f0, the absolute index of the next block's first frame); 0 for NULL. */
CAMDELTA_API size_t camdelta_stream_frames(const camdelta_stream *stream);
/** The frame count of the next block (the one camdelta_stream_step takes); 0 for NULL. */
CAMDELTA_API size_t camdelta_stream_next_frames(const camdelta_stream *stream);
/** The device memory the stream holds, in bytes (its state, look-back, weights and step scratch; the context's
 *  branch workspace is the context's); 0 for NULL. Constant over the stream's life. */
CAMDELTA_API size_t camdelta_stream_device_bytes(const camdelta_stream *stream);
/** Back to frame 0 with a zero state (nothing enqueued). Returns INVALID_ARGUMENT for NULL. */
CAMDELTA_API camdelta_status camdelta_stream_reset(camdelta_stream *stream);

/** Save and restore. The image (host memory or file, the same bytes; the format is docs/streaming.md's) is a
 *  versioned header naming the stream's configuration (B, H, D, Hs, Ws, ph, pw, the schedule, k_scale, norm_eps,
 *  the dtype and a hash of the weights), then f0, M and the look-back, then a checksum. Restoring needs a stream of
 *  the same configuration (algorithm and precision may differ); it checks everything before changing anything.
 *
 *  state_size: the image's size in bytes (the same for every f0), 0 for NULL.
 *  save: waits for the stream's committed steps, writes the image to dst (`size` bytes available; *written, if not
 *  NULL, receives the image's size). Returns INVALID_ARGUMENT (NULL stream or dst), BUFFER_TOO_SMALL, OPENCL.
 *  restore: INVALID_ARGUMENT (NULL argument, an image of another configuration: the message names the field),
 *  FORMAT (not a stream image, another format version, a size that is not the image's, a frame count the schedule
 *  never reaches, a damaged image: the checksum), OPENCL.
 *  save_file / restore_file: the same through a file (written to a temporary name then renamed, so a crash never
 *  leaves a partial image under `path`; read with its size checked before anything is allocated: a file of another
 *  size whose header names another configuration, say another dtype, is INVALID_ARGUMENT naming the field, else
 *  FORMAT). Also IO. */
CAMDELTA_API size_t camdelta_stream_state_size(const camdelta_stream *stream);
CAMDELTA_API camdelta_status camdelta_stream_save(camdelta_stream *stream, void *dst, size_t size, size_t *written);
CAMDELTA_API camdelta_status camdelta_stream_restore(camdelta_stream *stream, const void *src, size_t size);
CAMDELTA_API camdelta_status camdelta_stream_save_file(camdelta_stream *stream, const char *path);
CAMDELTA_API camdelta_status camdelta_stream_restore_file(camdelta_stream *stream, const char *path);

#ifdef __cplusplus
}
#endif
#endif /* CAMDELTA_STREAM_H */
