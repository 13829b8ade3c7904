/* Streams in the tool: a whole sequence's device tensors run through a stream block by block (cmd_run_stream.c),
 * shared by `run branch --stream`, `demo --stream` and `bench`'s stream rows. */
#ifndef CD_CLI_STREAM_H
#define CD_CLI_STREAM_H
#include "camdelta_stream.h"

/** A whole sequence: q_raw, k_raw, v_raw (B, N, H, D), camera_conditions (B, T, 20), beta (B, H, T, S),
 *  decay (B, H, T) and y (B, N, H, D); the activations (q_raw, k_raw, v_raw, y) of es bytes each (the stream's
 *  dtype), the rest f32. */
typedef struct cli_stream_seq {
  size_t B, H, T, S, C, es;
  camdelta_buffer in[7];
} cli_stream_seq;

/** Frames [f0, f0 + Tb) of the sequence's inputs into the block buffers blk[0..5] (to_block), or the block's y
 *  (blk[6]) into the sequence's y. Enqueued (clEnqueueCopyBufferRect). OPENCL on failure. */
camdelta_status cli_stream_block(camdelta_context *ctx, const cli_stream_seq *q, size_t f0, size_t Tb,
                                 const camdelta_buffer blk[7], int to_block);
/** The sequence from the stream's frame to T, block by block: `repeat` non-committing steps, then the committing
 *  one; y gathered into q's. total (optional) sums the steps' profiles; block_ms (optional) receives the
 *  committing steps' kernel time per block (the first nblock_ms blocks). */
camdelta_status cli_stream_run(camdelta_context *ctx, camdelta_stream *s, const cli_stream_seq *q, unsigned repeat,
                               camdelta_buffer blk[7], camdelta_profile *total, double *block_ms, size_t nblock_ms);
/** 1 when T frames are whole blocks of the schedule; *blocks: how many blocks reach T. */
int cli_stream_tiles(size_t T, size_t cs, camdelta_chunk_strategy strategy, size_t *blocks);
/** camdelta demo --stream (tools/cmd_demo_stream.c). */
int cmd_demo_stream(int argc, char **argv);
#endif
