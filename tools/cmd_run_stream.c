/* camdelta run branch --stream [--repeat K] (docs/streaming.md): the `branch` files of a whole sequence run through a
 * stream block by block, each block committed after K non-committing steps, y written as `run branch` writes it
 * (the same files, so that they can be compared). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "camdelta_stream.h"
#include "cli_stream.h"

/* Copies `rows` rows of `row` bytes: row r from src at src_at + r * src_pitch to dst at dst_at + r * dst_pitch (the
 * buffers' offsets in elements of es bytes). */
static camdelta_status copy_rows(camdelta_context *ctx, camdelta_buffer src, size_t src_at, size_t src_pitch,
                                 camdelta_buffer dst, size_t dst_at, size_t dst_pitch, size_t rows, size_t row,
                                 size_t es) {
  const size_t so[3] = {src.offset * es + src_at, 0, 0}, dO[3] = {dst.offset * es + dst_at, 0, 0},
               region[3] = {row, rows, 1};
  const cl_int err = clEnqueueCopyBufferRect(camdelta_context_queue(ctx), src.mem, dst.mem, so, dO, region, src_pitch,
                                             0, dst_pitch, 0, 0, NULL, NULL);
  return err == CL_SUCCESS ? CAMDELTA_OK : CAMDELTA_ERROR_OPENCL;
}

camdelta_status cli_stream_block(camdelta_context *ctx, const cli_stream_seq *q, size_t f0, size_t Tb,
                                 const camdelta_buffer blk[7], int to_block) {
  const size_t B = q->B, H = q->H, T = q->T, es = q->es, fs = q->S * q->C * es;
  camdelta_status st = CAMDELTA_OK;
  if (!to_block) return copy_rows(ctx, blk[6], 0, Tb * fs, q->in[6], f0 * fs, T * fs, B, Tb * fs, es);
  /* (outer, T frames of fb bytes) -> (outer, Tb frames) */
  const size_t outer[6] = {B, B, B, B, B * H, B * H}, fb[6] = {fs, fs, fs, 80, q->S * 4, 4};
  for (int i = 0; i < 6 && !st; i++)
    st = copy_rows(ctx, q->in[i], f0 * fb[i], T * fb[i], blk[i], 0, Tb * fb[i], outer[i], Tb * fb[i], i < 3 ? es : 4);
  return st;
}

camdelta_status cli_stream_run(camdelta_context *ctx, camdelta_stream *s, const cli_stream_seq *q, unsigned repeat,
                               camdelta_buffer blk[7], camdelta_profile *total, double *block_ms, size_t nblock_ms) {
  camdelta_status st = CAMDELTA_OK;
  size_t k = 0;
  while (!st && camdelta_stream_frames(s) < q->T) {
    const size_t f0 = camdelta_stream_frames(s), Tb = camdelta_stream_next_frames(s);
    camdelta_profile prof = {0, 0};
    camdelta_stream_step_args a = {.frames = Tb, .commit = 0, .q_raw = blk[0], .k_raw = blk[1], .v_raw = blk[2],
                                   .camera_conditions = blk[3], .beta = blk[4], .decay = blk[5], .y = blk[6],
                                   .profile = total ? &prof : NULL};
    if ((st = cli_stream_block(ctx, q, f0, Tb, blk, 1))) break;
    for (unsigned r = 0; r <= repeat && !st; r++) {
      a.commit = r == repeat;
      st = camdelta_stream_step(ctx, s, &a);
      if (!st && total) total->kernel_ms += prof.kernel_ms, total->kernels += prof.kernels;
      if (!st && block_ms && r == repeat && k < nblock_ms) block_ms[k] = prof.kernel_ms;
    }
    if (!st) st = cli_stream_block(ctx, q, f0, Tb, blk, 0);
    k++;
  }
  return st;
}

int cli_stream_tiles(size_t T, size_t cs, camdelta_chunk_strategy strategy, size_t *blocks) {
  size_t f = strategy == CAMDELTA_CHUNK_FIRST_FRAME ? 1 : strategy == CAMDELTA_CHUNK_FIRST_CHUNK_PLUS_ONE ? cs + 1 : cs;
  size_t n = 1;
  while (f < T) f += cs, n++;
  *blocks = n;
  return f == T;
}
