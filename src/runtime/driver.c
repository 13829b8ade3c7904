/* The entry driver: the steps every public enqueuing entry runs, in order, from the entry's descriptor (the
 * list is in internal.h). */
#include <string.h>

#include "runtime/internal.h"

camdelta_buffer cd_slot_buffer(const cd_call *c, size_t i) {
  const cd_slot *s = &c->entry->slots[i];
  const char *part = s->part ? (const char *)c->second : (const char *)c->args;
  camdelta_buffer b;
  memcpy(&b, part + s->offset, sizeof b);
  return b;
}

/* A buffer of another context would fail only when a kernel using it is enqueued, after the call's earlier kernels
 * have run, or on some drivers not at all (the kernel then reads and writes it). */
static camdelta_status check_owner(const char *op, const camdelta_context *ctx, const char *name, cl_mem mem) {
  if (!mem) return CAMDELTA_OK;
  cl_context owner = NULL;
  const cl_int err = clGetMemObjectInfo(mem, CL_MEM_CONTEXT, sizeof owner, &owner, NULL);
  if (err != CL_SUCCESS)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: argument '%s' is not a valid cl_mem (%s)", op, name,
                   camdelta_cl_error_name(err));
  if (owner != ctx->context)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT,
                   "%s: argument '%s' belongs to another OpenCL context than the camdelta context's", op, name);
  return CAMDELTA_OK;
}

/* Step 2. The argument structs are known to be non-NULL before any of their fields is read. */
static camdelta_status prologue(cd_call *c) {
  const cd_entry *e = c->entry;
  if (!c->ctx) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'ctx' is NULL", e->op);
  if (!c->args) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'args' is NULL", e->op);
  if (e->second && !c->second) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: '%s' is NULL", e->op, e->second);
  if (c->saved && c->saved_ctx != c->ctx)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: '%s' was created for another context", e->op,
                   e->saved_name ? e->saved_name : "saved");
  c->profile = NULL;
  if (e->profile_part >= 0) {
    const char *part = e->profile_part ? (const char *)c->second : (const char *)c->args;
    memcpy(&c->profile, part + e->profile_offset, sizeof c->profile);
  }
  if (c->profile && !c->ctx->profiling)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT,
                   "%s: 'profile' requested but the queue was created without CL_QUEUE_PROFILING_ENABLE", e->op);
  camdelta_status st = CAMDELTA_OK;
  for (size_t i = 0; i < e->nslots && !st; i++)
    st = check_owner(e->op, c->ctx, e->slots[i].name, cd_slot_buffer(c, i).mem);
  return st;
}

/* Byte ranges [start, end) of a used, present slot (sizes are checked first, so they do not overflow). */
static void range_of(const cd_call *c, size_t i, size_t *start, size_t *end) {
  const camdelta_buffer b = cd_slot_buffer(c, i);
  *start = b.offset * c->use[i].es;
  *end = *start + c->use[i].elems * c->use[i].es;
}

static int present(const cd_call *c, size_t i) { return c->use[i].need != CD_UNUSED && cd_slot_buffer(c, i).mem; }

/* An output that covers exactly the input it may be in place of. */
static int in_place(const cd_call *c, size_t out, size_t in) {
  const cd_slot *s = c->entry->slots;
  if (!s[out].inplace || strcmp(s[out].inplace, s[in].name) != 0) return 0;
  size_t a0, a1, b0, b1;
  range_of(c, out, &a0, &a1);
  range_of(c, in, &b0, &b1);
  return a0 == b0 && a1 == b1;
}

/* Step 4. */
static camdelta_status check_uses(const cd_call *c) {
  const cd_entry *e = c->entry;
  camdelta_status st;
  for (size_t i = 0; i < e->nslots; i++)
    if (c->use[i].need != CD_UNUSED &&
        (st = cd_check_buffer(e->op, e->slots[i].name, cd_slot_buffer(c, i), c->use[i].elems, c->use[i].es,
                              c->use[i].need == CD_OPTIONAL)))
      return st;
  for (size_t i = 0; i < e->nslots; i++) {
    if (e->slots[i].role != CD_OUT || !present(c, i)) continue;
    const cl_mem m = cd_slot_buffer(c, i).mem;
    size_t a0, a1;
    range_of(c, i, &a0, &a1);
    for (size_t j = 0; j < e->nslots; j++) {
      if (j == i || e->slots[j].role == CD_UNREAD || !present(c, j) || cd_slot_buffer(c, j).mem != m) continue;
      if (e->slots[j].role == CD_OUT && j > i) continue; /* each pair of outputs once */
      size_t b0, b1;
      range_of(c, j, &b0, &b1);
      if (a0 >= b1 || b0 >= a1 || (e->slots[j].role == CD_IN && in_place(c, i, j))) continue;
      if (e->slots[j].role == CD_IN)
        return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: output '%s' overlaps input '%s' in the same cl_mem",
                       e->op, e->slots[i].name, e->slots[j].name);
      return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: outputs '%s' and '%s' overlap in the same cl_mem", e->op,
                     e->slots[j].name, e->slots[i].name);
    }
  }
  return CAMDELTA_OK;
}

camdelta_status cd_run_entry(cd_call *c) {
  const cd_entry *e = c->entry;
  cd_clear_error();
  memset(c->use, 0, sizeof c->use);
  camdelta_status st = prologue(c);
  if (st) return st;
  st = e->check(c);
  if (!st) st = check_uses(c);
  if (!st && e->plan) st = e->plan(c);
  if (!st) {
    if (c->profile) c->profile->kernel_ms = 0, c->profile->kernels = 0;
    cd_launch l;
    cd_launch_init(&l, c->profile);
    st = e->enqueue(c, &l);
    st = cd_launch_end(c->ctx, &l, st);
  }
  return e->end ? e->end(c, st) : st;
}
