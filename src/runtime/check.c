/* Argument checks shared by the operations: sizes, buffers, dtypes. */
#include <limits.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/internal.h"

/* The size rule of camdelta, camdelta_mpi and the tool: every product and sum of sizes that come from a caller, a
 * file or the command line goes through these (or the public camdelta_size_* below), and a result that does not
 * fit size_t is an error (CAMDELTA_ERROR_OVERFLOW, or a usage/input error in the tool) before anything is
 * allocated or enqueued. Each entry point's check computes every tensor's element count and every host allocation
 * this way; the code after it uses only sizes that are factors of a count so checked. */
int cd_mul(size_t *out, size_t a, size_t b) {
  if (a != 0 && b > SIZE_MAX / a) return 0;
  *out = a * b;
  return 1;
}

int cd_add(size_t *out, size_t a, size_t b) {
  if (b > SIZE_MAX - a) return 0;
  *out = a + b;
  return 1;
}

int cd_prod(size_t *out, int n, const size_t *factors) {
  size_t p = 1;
  for (int i = 0; i < n; i++)
    if (!cd_mul(&p, p, factors[i])) return 0;
  *out = p;
  return 1;
}

void *cd_malloc_array(size_t n, size_t size) {
  size_t bytes;
  if (!cd_mul(&bytes, n, size)) return NULL;
  return malloc(bytes ? bytes : 1);
}

int camdelta_size_mul(size_t *out, size_t a, size_t b) { return out && cd_mul(out, a, b); }
int camdelta_size_add(size_t *out, size_t a, size_t b) { return out && cd_add(out, a, b); }
int camdelta_size_prod(size_t *out, size_t n, const size_t *factors) {
  if (!out || (n && !factors) || n > INT_MAX) return 0;
  return cd_prod(out, (int)n, factors);
}

camdelta_status cd_check_buffer(const char *op, const char *name, camdelta_buffer b, size_t elems, size_t elem_size,
                                int optional) {
  if (!b.mem) {
    if (optional) return CAMDELTA_OK;
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: argument '%s' is NULL (expected a cl_mem of %zu elements)", op,
                   name, elems);
  }
  size_t end, bytes;
  if (b.offset > SIZE_MAX - elems || !cd_mul(&bytes, b.offset + elems, elem_size) ||
      !cd_mul(&end, elems, elem_size))
    return cd_fail(CAMDELTA_ERROR_OVERFLOW, "%s: argument '%s': offset %zu + %zu elements overflows size_t", op, name,
                   b.offset, elems);
  size_t have = 0;
  cl_int err = clGetMemObjectInfo(b.mem, CL_MEM_SIZE, sizeof have, &have, NULL);
  if (err != CL_SUCCESS)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: argument '%s' is not a valid cl_mem (%s)", op, name,
                   camdelta_cl_error_name(err));
  if (have < bytes)
    return cd_fail(CAMDELTA_ERROR_BUFFER_TOO_SMALL,
                   "%s: argument '%s' holds %zu bytes but needs %zu (offset %zu + %zu elements of %zu bytes)", op,
                   name, have, bytes, b.offset, elems, elem_size);
  return CAMDELTA_OK;
}

camdelta_status cd_check_head_dim(const char *op, size_t D) {
  if (D < CAMDELTA_MIN_HEAD_DIM || D > CAMDELTA_MAX_HEAD_DIM || D % CAMDELTA_HEAD_DIM_MULTIPLE != 0)
    return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: head dim D=%zu unsupported (expected a multiple of %d in [%d, %d])",
                   op, D, CAMDELTA_HEAD_DIM_MULTIPLE, CAMDELTA_MIN_HEAD_DIM, CAMDELTA_MAX_HEAD_DIM);
  return CAMDELTA_OK;
}

camdelta_status cd_check_dtype(const char *op, camdelta_dtype dtype) {
  if (dtype != CAMDELTA_F32 && dtype != CAMDELTA_F16 && dtype != CAMDELTA_BF16)
    return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: dtype %d unsupported (expected CAMDELTA_F32, F16 or BF16)", op,
                   (int)dtype);
  return CAMDELTA_OK;
}

const char *cd_dtype_opts(camdelta_dtype d, char *buf) {
  snprintf(buf, 40, "-DCD_DTYPE=%d%s", (int)cd_raw_dtype(d), ((int)d & CD_SCAN_F32) ? " -DCD_SDTYPE=0" : "");
  return buf;
}

const char *camdelta_dtype_name(camdelta_dtype dtype) {
  static const char *const NAMES[] = {[CAMDELTA_F32] = "f32", [CAMDELTA_F16] = "f16", [CAMDELTA_BF16] = "bf16"};
  return CD_ENUM_NAME(NAMES, dtype);
}

size_t camdelta_dtype_size(camdelta_dtype dtype) {
  switch (dtype) {
    case CAMDELTA_F32: return 4;
    case CAMDELTA_F16:
    case CAMDELTA_BF16: return 2;
  }
  return 0;
}

static int overlaps(const cd_tensor_arg *a, const cd_tensor_arg *b) {
  if (!a->b.mem || a->b.mem != b->b.mem) return 0;
  const size_t a0 = a->b.offset * a->es, a1 = a0 + a->elems * a->es;
  const size_t b0 = b->b.offset * b->es, b1 = b0 + b->elems * b->es;
  return a0 < b1 && b0 < a1;
}

camdelta_status cd_check_no_overlap(const char *op, const cd_tensor_arg *outs, size_t nout, const cd_tensor_arg *ins,
                                    size_t nin) {
  for (size_t i = 0; i < nout; i++) {
    for (size_t j = 0; j < nin; j++)
      if (overlaps(&outs[i], &ins[j]))
        return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: output '%s' overlaps input '%s' in the same cl_mem", op,
                       outs[i].name, ins[j].name);
    for (size_t j = 0; j < i; j++)
      if (overlaps(&outs[i], &outs[j]))
        return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: outputs '%s' and '%s' overlap in the same cl_mem", op,
                       outs[j].name, outs[i].name);
  }
  return CAMDELTA_OK;
}

camdelta_status cd_copy_text(const char *op, const char *text, char *buf, size_t size) {
  const size_t need = strlen(text) + 1;
  if (need > size)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: buffer of %zu bytes too small (%zu needed)", op, size, need);
  memcpy(buf, text, need);
  return CAMDELTA_OK;
}

int cd_buffers_aligned4(const camdelta_buffer *b, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (b[i].mem && b[i].offset % 4) return 0;
  return 1;
}
