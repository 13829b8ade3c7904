/* Chunk bounds of the camera branch (docs/math.md §8.2 and §8.4; upstream normalize_chunk_index in chunk_utils.py):
 * the scan's chunks and the short conv's segments. Host-only integer logic shared by the device operations,
 * the f64 references and the CLI. */
#include <stdio.h>

#include "runtime/internal.h"

const char *camdelta_chunk_strategy_name(camdelta_chunk_strategy strategy) {
  static const char *const NAMES[] = {[CAMDELTA_CHUNK_UNIFORM] = "uniform",
                                      [CAMDELTA_CHUNK_FIRST_FRAME] = "first_frame",
                                      [CAMDELTA_CHUNK_FIRST_CHUNK_PLUS_ONE] = "first_chunk_plus_one"};
  return CD_ENUM_NAME(NAMES, strategy);
}

/* Appends x to bounds (capacity cap); 0 when full. */
static int push(size_t *bounds, size_t cap, size_t *n, size_t x) {
  if (*n >= cap) return 0;
  bounds[(*n)++] = x;
  return 1;
}

/* The frame after x by steps of cs, or T when that step would reach or pass T (no sum that can wrap). */
static size_t step(size_t x, size_t cs, size_t T) { return cs < T - x ? x + cs : T; }

static camdelta_status check_chunking(const char *op, size_t T, const camdelta_chunking *c) {
  if (T == 0) return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: T=0 frames (expected at least 1)", op);
  /* the operations' limit (N < 2^32 tokens), and so every loop below ends within 2^32 steps */
  if (T > UINT32_MAX) return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: T=%zu frames exceeds 2^32-1", op, T);
  if (!c) return CAMDELTA_OK;
  if (c->strategy != CAMDELTA_CHUNK_UNIFORM && c->strategy != CAMDELTA_CHUNK_FIRST_FRAME &&
      c->strategy != CAMDELTA_CHUNK_FIRST_CHUNK_PLUS_ONE)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT,
                   "%s: chunk strategy %d unknown (expected uniform, first_frame or first_chunk_plus_one)", op,
                   (int)c->strategy);
  if (c->chunk_index_count && !c->chunk_index)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'chunk_index' is NULL but chunk_index_count is %zu", op,
                   c->chunk_index_count);
  if (c->chunk_index) {
    if (c->chunk_index_count == 0)
      return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: 'chunk_index' is empty (expected frame starts beginning with 0)", op);
    if (c->chunk_index[0] != 0)
      return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: chunk_index[0] = %lld (expected 0, the first frame)", op,
                     (long long)c->chunk_index[0]);
    for (size_t i = 1; i < c->chunk_index_count; i++) {
      const int64_t x = c->chunk_index[i], p = c->chunk_index[i - 1];
      if (x <= p)
        return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT,
                       "%s: chunk_index is not strictly increasing (chunk_index[%zu] = %lld after %lld)", op, i,
                       (long long)x, (long long)p);
      if ((uint64_t)x >= T)
        return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT,
                       "%s: chunk_index[%zu] = %lld is out of range (frame starts must be < T = %zu)", op, i,
                       (long long)x, T);
    }
  }
  return CAMDELTA_OK;
}

/* The scan's bounds, assuming check_chunking passed. */
static camdelta_status scan_bounds(size_t T, const camdelta_chunking *c, size_t *b, size_t cap, size_t *count) {
  size_t n = 0;
  int ok = 1;
  if (c && c->chunk_index) {
    for (size_t i = 0; i < c->chunk_index_count && ok; i++) ok = push(b, cap, &n, (size_t)c->chunk_index[i]);
  } else if (!c || c->chunk_size == 0) {
    ok = push(b, cap, &n, 0);
  } else {
    const size_t cs = c->chunk_size;
    switch (c->strategy) {
      case CAMDELTA_CHUNK_UNIFORM:
        for (size_t x = 0; x < T && ok; x = step(x, cs, T)) ok = push(b, cap, &n, x);
        if (ok && n > 1 && T - b[n - 1] < cs) n--;
        break;
      case CAMDELTA_CHUNK_FIRST_FRAME:
        ok = push(b, cap, &n, 0);
        if (T > 1)
          for (size_t x = 1; x < T && ok; x = step(x, cs, T)) ok = push(b, cap, &n, x);
        if (ok && n > 2 && T - b[n - 1] < cs) n--;
        break;
      case CAMDELTA_CHUNK_FIRST_CHUNK_PLUS_ONE:
        ok = push(b, cap, &n, 0);
        if (cs < T - 1) /* T > cs + 1 */
          for (size_t x = cs + 1; x < T && ok; x = step(x, cs, T)) ok = push(b, cap, &n, x);
        if (ok && n > 1 && T - b[n - 1] < cs) n--;
        break;
    }
  }
  if (ok) ok = push(b, cap, &n, T);
  if (!ok)
    return cd_fail(CAMDELTA_ERROR_BUFFER_TOO_SMALL, "camdelta_chunk_bounds: 'bounds' holds %zu entries, too few (T + 1 = "
                   "%zu always suffice)", cap, T + 1);
  *count = n;
  return CAMDELTA_OK;
}

/* The checks both bounds entries start with. */
static camdelta_status check_bounds_call(const char *op, size_t T, const camdelta_chunking *chunking,
                                         const size_t *bounds, const size_t *count) {
  cd_clear_error();
  if (!bounds || !count)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: '%s' is NULL", op, bounds ? "count" : "bounds");
  return check_chunking(op, T, chunking);
}

camdelta_status camdelta_chunk_bounds(size_t T, const camdelta_chunking *chunking, size_t *bounds, size_t cap,
                                      size_t *count) {
  camdelta_status st = check_bounds_call("camdelta_chunk_bounds", T, chunking, bounds, count);
  if (st) return st;
  return scan_bounds(T, chunking, bounds, cap, count);
}

camdelta_status camdelta_conv_bounds(size_t T, const camdelta_chunking *chunking, size_t *bounds, size_t cap,
                                     size_t *count) {
  static const char op[] = "camdelta_conv_bounds";
  camdelta_status st = check_bounds_call(op, T, chunking, bounds, count);
  if (st) return st;
  const size_t cs = chunking ? chunking->chunk_size : 0;
  if (cs == 0 || cs >= T || T % cs == 0) {
    /* bidirectional, or the upstream uniform rule */
    const size_t by = (cs == 0 || cs >= T) ? T : cs;
    size_t n = 0;
    for (size_t x = 0;; x += by) { /* T <= 2^32-1: x + by cannot wrap */
      if (n >= cap)
        return cd_fail(CAMDELTA_ERROR_BUFFER_TOO_SMALL, "%s: 'bounds' holds %zu entries, too few (T + 1 = %zu always "
                       "suffice)", op, cap, T + 1);
      bounds[n++] = x;
      if (x == T) break;
    }
    *count = n;
    return CAMDELTA_OK;
  }
  return scan_bounds(T, chunking, bounds, cap, count);
}
