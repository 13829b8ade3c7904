/* Kernel arguments, launches and their profiling events. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/internal.h"

static void set(cd_args *a, size_t size, const void *value) {
  if (a->err != CL_SUCCESS) return;
  a->err = clSetKernelArg(a->kernel, a->index++, size, value);
}

void cd_arg_mem(cd_args *a, cl_mem m) { set(a, sizeof m, &m); }
void cd_arg_buf(cd_args *a, camdelta_buffer b) {
  cd_arg_mem(a, b.mem);
  cd_arg_u64(a, (uint64_t)b.offset);
}
void cd_arg_bufs(cd_args *a, const camdelta_buffer *b, size_t n) {
  for (size_t i = 0; i < n; i++) cd_arg_buf(a, b[i]);
}
/* the OpenCL C types of the kernels' scalar parameters, as compound literals */
void cd_arg_u64(cd_args *a, uint64_t v) { set(a, sizeof(cl_ulong), &(cl_ulong){v}); }
void cd_arg_u32(cd_args *a, uint32_t v) { set(a, sizeof(cl_uint), &(cl_uint){v}); }
void cd_arg_i32(cd_args *a, int32_t v) { set(a, sizeof(cl_int), &(cl_int){v}); }
void cd_arg_f32(cd_args *a, float v) { set(a, sizeof(cl_float), &(cl_float){v}); }
void cd_arg_local(cd_args *a, size_t bytes) { set(a, bytes, NULL); }

void cd_launch_init(cd_launch *l, camdelta_profile *profile) {
  memset(l, 0, sizeof *l);
  l->profile = profile;
}

/* Option "verbose" KERNELS (CAMDELTA_PROFILE_KERNELS): each profiled kernel's time on stderr. */
static camdelta_status flush_events(const camdelta_context *ctx, cd_launch *l, int sum) {
  camdelta_status st = CAMDELTA_OK;
  const int verbose = cd_option(ctx, CD_OPT_VERBOSE_KERNELS, CAMDELTA_F32) != 0;
  if (l->n == 0) return st;
  cl_int err = clWaitForEvents(l->n, l->events);
  if (err != CL_SUCCESS) st = cd_cl_fail(err, "waiting for kernels");
  for (unsigned i = 0; i < l->n; i++) {
    if (sum && st == CAMDELTA_OK && !ctx->kernel_times) {
      l->profile->kernel_ms = NAN; /* no kernel times from this driver: none made up */
      if (verbose) fprintf(stderr, "camdelta kernel %-40s %9s\n", l->names[i] ? l->names[i] : "?", "n/a");
    } else if (sum && st == CAMDELTA_OK) {
      cl_ulong t0 = 0, t1 = 0;
      cl_int e0 = clGetEventProfilingInfo(l->events[i], CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL);
      cl_int e1 = clGetEventProfilingInfo(l->events[i], CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
      if (e0 != CL_SUCCESS || e1 != CL_SUCCESS)
        st = cd_cl_fail(e0 != CL_SUCCESS ? e0 : e1, "reading kernel profiling info (queue without profiling?)");
      else if (t1 > t0)
        l->profile->kernel_ms += (double)(t1 - t0) * 1e-6;
      if (verbose && st == CAMDELTA_OK)
        fprintf(stderr, "camdelta kernel %-40s %9.4f ms\n", l->names[i] ? l->names[i] : "?",
                t1 > t0 ? (double)(t1 - t0) * 1e-6 : 0.0);
    }
    clReleaseEvent(l->events[i]);
  }
  l->n = 0;
  return st;
}

/* The trace line of a launch (emulate.c): the kernel, its program's source file and build options, the sizes and
 * the local memory the kernel uses with its arguments as set. */
static void trace_launch(camdelta_context *ctx, cl_kernel k, cl_uint dims, const size_t *gws, const size_t *lws) {
  char name[128] = "?";
  cl_program prog = NULL;
  cl_ulong local = 0;
  clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, sizeof name, name, NULL);
  name[sizeof name - 1] = '\0';
  clGetKernelInfo(k, CL_KERNEL_PROGRAM, sizeof prog, &prog, NULL);
  clGetKernelWorkGroupInfo(k, ctx->device, CL_KERNEL_LOCAL_MEM_SIZE, sizeof local, &local, NULL);
  const char *key = "?";
  mtx_lock(&ctx->lock);
  for (const cd_program_entry *e = ctx->programs; e; e = e->next)
    if (e->program == prog) key = e->key;
  fprintf(ctx->trace, "  %s [", name);
  for (const char *c = key; *c; c++) fputc(*c == '\n' ? ' ' : *c, ctx->trace); /* "source options" */
  mtx_unlock(&ctx->lock);
  fprintf(ctx->trace, "] global");
  for (cl_uint d = 0; d < dims; d++) fprintf(ctx->trace, "%s%zu", d ? "x" : " ", gws[d]);
  fprintf(ctx->trace, " local");
  for (cl_uint d = 0; d < dims; d++) {
    if (lws) fprintf(ctx->trace, "%s%zu", d ? "x" : " ", lws[d]);
    else fprintf(ctx->trace, "%s", d ? "" : " any");
  }
  fprintf(ctx->trace, " lmem %llu\n", (unsigned long long)local);
}

/* Room for one more event in l (a full list is summed first); 0 when l keeps none. */
static camdelta_status make_room(camdelta_context *ctx, cd_launch *l) {
  if (l && l->profile && l->n == CD_MAX_EVENTS) return flush_events(ctx, l, 1);
  return CAMDELTA_OK;
}

/* The event pointer an enqueue fills: l's next slot when l keeps events. */
static cl_event *next_event(cd_launch *l) { return l && l->profile ? &l->events[l->n] : NULL; }

/* After a successful enqueue that filled next_event(l): keep the event under `what`. */
static void keep_event(cd_launch *l, const char *what) {
  if (l && l->profile) l->names[l->n++] = what;
}

camdelta_status cd_enqueue(camdelta_context *ctx, cl_kernel k, cl_uint dims, const size_t *gws, const size_t *lws,
                           cd_launch *l, const char *what) {
  for (cl_uint d = 0; d < dims; d++)
    if (gws[d] == 0) return CAMDELTA_OK; /* nothing to do */
  camdelta_status st = make_room(ctx, l);
  if (st) return st;
  if (ctx->trace) trace_launch(ctx, k, dims, gws, lws);
  if (ctx->dry_run) return CAMDELTA_OK;
  const cl_int err = clEnqueueNDRangeKernel(ctx->queue, k, dims, NULL, gws, lws, 0, NULL, next_event(l));
  if (err != CL_SUCCESS) return cd_cl_fail(err, what);
  keep_event(l, what);
  if (l->profile) l->profile->kernels++;
  return CAMDELTA_OK;
}

/* A device copy is device time of the call: its event joins the kernels' in kernel_ms (not in the kernel count). */
camdelta_status cd_copy(camdelta_context *ctx, cl_mem src, size_t src_off, cl_mem dst, size_t dst_off, size_t bytes,
                        cd_launch *l) {
  if (bytes == 0) return CAMDELTA_OK;
  camdelta_status st = make_room(ctx, l);
  if (st) return st;
  cd_trace_note(ctx, "  copy %zu bytes", bytes);
  if (ctx->dry_run) return CAMDELTA_OK;
  const cl_int err = clEnqueueCopyBuffer(ctx->queue, src, dst, src_off, dst_off, bytes, 0, NULL, next_event(l));
  if (err != CL_SUCCESS) return cd_cl_fail(err, "clEnqueueCopyBuffer");
  keep_event(l, "copy");
  return CAMDELTA_OK;
}

camdelta_status cd_launch_end(camdelta_context *ctx, cd_launch *l, camdelta_status st) {
  camdelta_status fst = flush_events(ctx, l, st == CAMDELTA_OK && l->profile);
  return st ? st : fst;
}

camdelta_status cd_zero(camdelta_context *ctx, cl_mem mem, size_t off, size_t bytes, cd_launch *l) {
  if (bytes == 0) return CAMDELTA_OK;
  camdelta_status st = make_room(ctx, l);
  if (st) return st;
  cd_trace_note(ctx, "  fill %zu bytes", bytes);
  if (ctx->dry_run) return CAMDELTA_OK;
  const cl_uchar zero = 0;
  const cl_uint z4 = 0;
  const int words = off % 4 == 0 && bytes % 4 == 0;
  const cl_int err = clEnqueueFillBuffer(ctx->queue, mem, words ? (const void *)&z4 : (const void *)&zero,
                                         words ? sizeof z4 : sizeof zero, off, bytes, 0, NULL, next_event(l));
  if (err != CL_SUCCESS) return cd_cl_fail(err, "clEnqueueFillBuffer");
  keep_event(l, "fill");
  return CAMDELTA_OK;
}

void cd_kernel_drop(cl_kernel *k) {
  if (*k) clReleaseKernel(*k);
  *k = NULL;
}

size_t cd_preferred_multiple(camdelta_context *ctx, cl_kernel k) {
  if (ctx->pref_multiple) return ctx->pref_multiple;
  size_t m = 0;
  if (clGetKernelWorkGroupInfo(k, ctx->device, CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE, sizeof m, &m, NULL) !=
          CL_SUCCESS ||
      m == 0)
    m = 1;
  return m;
}

size_t cd_kernel_max_wg(camdelta_context *ctx, cl_kernel k) {
  size_t m = 0;
  const size_t dev = ctx->info.max_work_group_size ? ctx->info.max_work_group_size : 1;
  if (clGetKernelWorkGroupInfo(k, ctx->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof m, &m, NULL) != CL_SUCCESS || m == 0)
    m = dev;
  /* never above the device's limit as the context reports it (lowered by CAMDELTA_DEVICE_LIMITS, emulate.c) */
  return m < dev ? m : dev;
}

camdelta_status cd_alloc(camdelta_context *ctx, size_t bytes, cl_mem *out) {
  cl_int err;
  *out = clCreateBuffer(ctx->context, CL_MEM_READ_WRITE, bytes ? bytes : 4, NULL, &err);
  if (err != CL_SUCCESS) {
    *out = NULL;
    return cd_cl_fail(err, "allocating a device buffer");
  }
  return CAMDELTA_OK;
}

camdelta_status cd_ensure_buffer(camdelta_context *ctx, cl_mem *mem, size_t *have, size_t bytes) {
  if (*mem && *have >= bytes) return CAMDELTA_OK;
  if (*mem) clReleaseMemObject(*mem);
  *mem = NULL;
  *have = 0;
  camdelta_status st = cd_alloc(ctx, bytes, mem);
  if (st == CAMDELTA_OK) *have = bytes;
  return st;
}
