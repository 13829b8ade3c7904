/* Contexts: device selection, borrowed queues, versions, threads. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>

#include "internal.h"
#include "prep_problem.h"

/* The version as the built shared library reports it (dlopen'd: not this test's own compile-time macros) against
 * the version in the library's file name (set by CMake's VERSION property) and the header's macros; the number
 * and the string agree with each other. */
static void test_version(void **state) {
  (void)state;
  const char *lib = getenv("CAMDELTA_SHARED_LIB");
  if (!lib || !*lib) fail_msg("CAMDELTA_SHARED_LIB is not set: run through ctest");
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) fail_msg("dlopen(%s): %s", lib, dlerror());
  const char *(*vs)(void) = NULL;
  unsigned (*vn)(void) = NULL;
  void *ps = dlsym(h, "camdelta_version_string"), *pn = dlsym(h, "camdelta_version_number");
  memcpy(&vs, &ps, sizeof vs); /* POSIX: object to function pointer */
  memcpy(&vn, &pn, sizeof vn);
  assert_non_null(vs);
  assert_non_null(vn);
  unsigned ma, mi, pa;
  char tail;
  assert_int_equal(sscanf(vs(), "%u.%u.%u%c", &ma, &mi, &pa, &tail), 3);
  assert_int_equal(vn(), ma * 10000 + mi * 100 + pa);
  char suffix[64];
  snprintf(suffix, sizeof suffix, ".so.%s", vs());
  const size_t ls = strlen(lib), lsuf = strlen(suffix);
  if (ls < lsuf || strcmp(lib + ls - lsuf, suffix) != 0)
    fail_msg("the library file %s does not end in %s: the build's version and the library's disagree", lib, suffix);
  /* the header this test was compiled with is the one of that library */
  assert_int_equal(ma, CAMDELTA_VERSION_MAJOR);
  assert_int_equal(mi, CAMDELTA_VERSION_MINOR);
  assert_int_equal(pa, CAMDELTA_VERSION_PATCH);
  assert_string_equal(vs(), CAMDELTA_VERSION_STRING);
  dlclose(h);
  assert_string_equal(camdelta_status_name(CAMDELTA_ERROR_SHAPE), "CAMDELTA_ERROR_SHAPE");
  assert_true(camdelta_is_error(CAMDELTA_ERROR_IO));
  assert_false(camdelta_is_error(CAMDELTA_OK));
  assert_string_equal(camdelta_cl_error_name(CL_INVALID_KERNEL_ARGS), "CL_INVALID_KERNEL_ARGS");
}

static void test_selectors(void **state) {
  (void)state;
  camdelta_context *ctx = NULL;
  TU_OK(camdelta_context_create(&ctx, "0:0"));
  camdelta_device_info info;
  TU_OK(camdelta_context_info(ctx, &info));
  assert_true(strlen(info.device_name) > 0);
  assert_true(info.max_work_group_size >= 1);
  char sub[8] = {0};
  memcpy(sub, info.device_name, strlen(info.device_name) < 4 ? strlen(info.device_name) : 4);
  camdelta_context_destroy(ctx);
  /* a case-insensitive substring of the device name */
  for (char *c = sub; *c; c++) *c = (char)((*c >= 'a' && *c <= 'z') ? *c - 32 : (*c >= 'A' && *c <= 'Z') ? *c + 32 : *c);
  TU_OK(camdelta_context_create(&ctx, sub));
  camdelta_context_destroy(ctx);
  /* a selector that matches nothing lists the devices there are */
  assert_int_equal(camdelta_context_create(&ctx, "no-such-device-xyz"), CAMDELTA_ERROR_DEVICE_NOT_FOUND);
  assert_null(ctx);
  assert_non_null(strstr(camdelta_last_message(), "no-such-device-xyz"));
  assert_non_null(strstr(camdelta_last_message(), info.device_name));
  assert_int_equal(camdelta_context_create(&ctx, "97:3"), CAMDELTA_ERROR_DEVICE_NOT_FOUND);
  /* CAMDELTA_DEVICE is read when the selector is NULL */
  const char *old = getenv("CAMDELTA_DEVICE");
  char *saved = old ? strdup(old) : NULL;
  setenv("CAMDELTA_DEVICE", "no-such-device-xyz", 1);
  assert_int_equal(camdelta_context_create(&ctx, NULL), CAMDELTA_ERROR_DEVICE_NOT_FOUND);
  if (saved) setenv("CAMDELTA_DEVICE", saved, 1);
  else unsetenv("CAMDELTA_DEVICE");
  free(saved);
  assert_int_equal(camdelta_context_create(NULL, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT);
}

/* Runs a prep forward with `ctx` and checks q against the reference. */
static void prep_check(camdelta_context *ctx, cl_context clctx, cl_command_queue queue, uint64_t seed) {
  prep_problem p;
  prep_problem_init(&p, 1, 50, 3, 32, CAMDELTA_F32, seed, 0);
  const size_t BNHD = p.B * p.N * p.H * p.D;
  cl_mem in[9], out[4];
  cl_int err;
  for (int i = 0; i < 9; i++) {
    in[i] = clCreateBuffer(clctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, p.count[i] * 4, p.in[i], &err);
    assert_int_equal(err, CL_SUCCESS);
  }
  for (int o = 0; o < 4; o++) {
    out[o] = clCreateBuffer(clctx, CL_MEM_READ_WRITE, (o < 3 ? BNHD : p.H * p.N) * 4, NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
  }
  camdelta_prep_args a = {p.B, p.N, p.H, p.D, p.dtype, p.k_scale, p.norm_eps, {in[0], 0}, {in[1], 0}, {in[2], 0},
                          {in[3], 0}, {in[4], 0}, {in[5], 0}, {in[6], 0}, {in[7], 0}, {in[8], 0}, {out[0], 0},
                          {out[1], 0}, {out[2], 0}, {out[3], 0}, NULL};
  TU_OK(camdelta_prep_forward(ctx, &a, NULL));
  float *q = malloc(BNHD * 4);
  assert_int_equal(clEnqueueReadBuffer(queue, out[0], CL_TRUE, 0, BNHD * 4, q, 0, NULL, NULL), CL_SUCCESS);
  double *rq;
  prep_problem_reference(&p, &rq, NULL, NULL, NULL);
  assert_true(tu_rel_err(q, rq, BNHD) < 1e-6);
  free(q), free(rq);
  for (int i = 0; i < 9; i++) clReleaseMemObject(in[i]);
  for (int o = 0; o < 4; o++) clReleaseMemObject(out[o]);
  prep_problem_free(&p);
}

static void test_borrowed_queue(void **state) {
  (void)state;
  camdelta_context *probe = tu_context();
  cl_device_id dev = camdelta_context_device(probe);
  cl_int err;
  cl_context clctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
  assert_int_equal(err, CL_SUCCESS);
  cl_command_queue q = clCreateCommandQueue(clctx, dev, 0, &err);
  assert_int_equal(err, CL_SUCCESS);
  camdelta_context *ctx = NULL;
  TU_OK(camdelta_context_create_from_queue(&ctx, clctx, q));
  assert_ptr_equal(camdelta_context_queue(ctx), q);
  assert_ptr_equal(camdelta_context_cl_context(ctx), clctx);
  prep_check(ctx, clctx, q, 11);
  camdelta_context_destroy(ctx);
  /* the application's objects survive camdelta */
  cl_uint refs = 0;
  clGetContextInfo(clctx, CL_CONTEXT_REFERENCE_COUNT, sizeof refs, &refs, NULL);
  assert_true(refs >= 1);
  /* a queue of another context is refused */
  cl_context other = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
  assert_int_equal(camdelta_context_create_from_queue(&ctx, other, q), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_int_equal(camdelta_context_create_from_queue(&ctx, clctx, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT);
  clReleaseContext(other);
  clReleaseCommandQueue(q);
  clReleaseContext(clctx);
}

typedef struct worker {
  camdelta_context *ctx;
  uint64_t seed;
} worker;

static int run_worker(void *arg) {
  worker *w = arg;
  for (int i = 0; i < 3; i++)
    prep_check(w->ctx, camdelta_context_cl_context(w->ctx), camdelta_context_queue(w->ctx), w->seed + (uint64_t)i);
  return 0;
}

/* Several threads share one context (and build its programs concurrently), for both forms of the prep forward
 * (CAMDELTA_PREP_FUSED is read at context creation): each program is built once. */
static void threads_with(const char *form, unsigned programs) {
  setenv("CAMDELTA_PREP_FUSED", form, 1);
  camdelta_context *ctx = NULL;
  TU_OK(camdelta_context_create(&ctx, NULL));
  unsetenv("CAMDELTA_PREP_FUSED");
  thrd_t t[4];
  worker w[4];
  for (int i = 0; i < 4; i++) {
    w[i].ctx = ctx, w[i].seed = 100 + 10 * (uint64_t)i;
    assert_int_equal(thrd_create(&t[i], run_worker, &w[i]), thrd_success);
  }
  for (int i = 0; i < 4; i++) thrd_join(t[i], NULL);
  camdelta_build_stats s;
  TU_OK(camdelta_context_build_stats(ctx, &s));
  assert_int_equal(s.programs, programs);
  camdelta_context_destroy(ctx);
}

static void test_threads(void **state) {
  (void)state;
  threads_with("0", 2); /* prep.cl for the inverse RMS and for D=32 */
  threads_with("1", 1); /* prep.cl for the fused form at D=32 */
}

/* ------------------------------------------------------------ the entry prologue (issue 11) */

enum { OP_PREP, OP_PREP_BWD, OP_SCAN, OP_SCAN_BWD, N_OPS };
static const char *const op_names[N_OPS] = {"camdelta_prep_forward", "camdelta_prep_backward", "camdelta_scan_forward",
                                            "camdelta_scan_backward"};
static const int op_nbuf[N_OPS] = {13, 22, 8, 14};
static const int op_first_out[N_OPS] = {9, 13, 5, 8}; /* index of the first output buffer */
#define POOL_BYTES 65536

/* A buffer of `c` filled with `byte`. */
static cl_mem filled(cl_context c, cl_command_queue q, unsigned char byte) {
  cl_int err;
  cl_mem m = clCreateBuffer(c, CL_MEM_READ_WRITE, POOL_BYTES, NULL, &err);
  assert_int_equal(err, CL_SUCCESS);
  unsigned char *h = malloc(POOL_BYTES);
  memset(h, byte, POOL_BYTES);
  assert_int_equal(clEnqueueWriteBuffer(q, m, CL_TRUE, 0, POOL_BYTES, h, 0, NULL, NULL), CL_SUCCESS);
  free(h);
  return m;
}

/* Runs operation `op` on small shapes with buffers m[] (inputs zero, outputs 0x5A). */
static camdelta_status run_op(camdelta_context *ctx, int op, cl_mem *m, camdelta_profile *prof) {
  const size_t B = 1, N = 16, H = 2, D = 16, F = 2, S = 8;
#define BUF(i) ((camdelta_buffer){m[i], 0})
  if (op == OP_PREP) {
    camdelta_prep_args a = CAMDELTA_PREP_ARGS_INIT;
    a.B = B, a.N = N, a.H = H, a.D = D, a.k_scale = 0.25f, a.norm_eps = 1e-6f;
    a.q_raw = BUF(0), a.k_raw = BUF(1), a.v_raw = BUF(2), a.q_norm_weight = BUF(3), a.k_norm_weight = BUF(4);
    a.proj_q = BUF(5), a.proj_kv = BUF(6), a.rope_cos = BUF(7), a.rope_sin = BUF(8);
    a.q = BUF(9), a.k = BUF(10), a.v = BUF(11), a.inflation_sq = BUF(12);
    a.profile = prof;
    return camdelta_prep_forward(ctx, &a, NULL);
  }
  if (op == OP_PREP_BWD) {
    camdelta_prep_backward_args a = CAMDELTA_PREP_BACKWARD_ARGS_INIT;
    a.B = B, a.N = N, a.H = H, a.D = D, a.k_scale = 0.25f, a.norm_eps = 1e-6f;
    a.q_raw = BUF(0), a.k_raw = BUF(1), a.v_raw = BUF(2), a.q_norm_weight = BUF(3), a.k_norm_weight = BUF(4);
    a.proj_q = BUF(5), a.proj_kv = BUF(6), a.rope_cos = BUF(7), a.rope_sin = BUF(8);
    a.grad_q = BUF(9), a.grad_k = BUF(10), a.grad_v = BUF(11), a.grad_inflation_sq = BUF(12);
    a.dq_raw = BUF(13), a.dk_raw = BUF(14), a.dv_raw = BUF(15), a.dq_norm_weight = BUF(16);
    a.dk_norm_weight = BUF(17), a.dproj_q = BUF(18), a.dproj_kv = BUF(19), a.drope_cos = BUF(20);
    a.drope_sin = BUF(21);
    a.profile = prof;
    return camdelta_prep_backward(ctx, &a, NULL);
  }
  if (op == OP_SCAN) {
    camdelta_scan_args a = CAMDELTA_SCAN_ARGS_INIT;
    a.B = B, a.H = H, a.D = D, a.F = F, a.S = S;
    a.q = BUF(0), a.k = BUF(1), a.v = BUF(2), a.beta = BUF(3), a.decay = BUF(4);
    a.out = BUF(5), a.init_state = BUF(6), a.final_state = BUF(7);
    a.init_state = (camdelta_buffer){NULL, 0}; /* an input among the outputs' slots: keep it absent */
    a.profile = prof;
    return camdelta_scan_forward(ctx, &a, NULL);
  }
  camdelta_scan_backward_args a = CAMDELTA_SCAN_BACKWARD_ARGS_INIT;
  a.B = B, a.H = H, a.D = D, a.F = F, a.S = S;
  a.q = BUF(0), a.k = BUF(1), a.v = BUF(2), a.beta = BUF(3), a.decay = BUF(4), a.init_state = BUF(5);
  a.grad_out = BUF(6), a.grad_final_state = BUF(7);
  a.dq = BUF(8), a.dk = BUF(9), a.dv = BUF(10), a.dbeta = BUF(11), a.ddecay = BUF(12), a.dinit_state = BUF(13);
  a.profile = prof;
  return camdelta_scan_backward(ctx, &a, NULL);
#undef BUF
}

/* Every output still holds 0x5A: nothing was enqueued that wrote it. */
static void outputs_untouched(cl_command_queue q, int op, cl_mem *m, cl_mem skip) {
  unsigned char *h = malloc(POOL_BYTES);
  for (int i = op_first_out[op]; i < op_nbuf[op]; i++) {
    if ((op == OP_SCAN && i == 6) || m[i] == skip) continue; /* init_state is kept absent */
    assert_int_equal(clEnqueueReadBuffer(q, m[i], CL_TRUE, 0, POOL_BYTES, h, 0, NULL, NULL), CL_SUCCESS);
    for (size_t b = 0; b < POOL_BYTES; b++)
      if (h[b] != 0x5A) fail_msg("%s: output %d was written at byte %zu", op_names[op], i, b);
  }
  free(h);
}

/* A buffer from another OpenCL context, in any slot of any operation, is rejected by name with nothing enqueued
 * (issue 11: it was not checked before enqueueing). */
static void test_foreign_buffers(void **state) {
  (void)state;
  camdelta_context *ctx = tu_context();
  cl_context c = camdelta_context_cl_context(ctx);
  cl_command_queue q = camdelta_context_queue(ctx);
  cl_device_id dev = camdelta_context_device(ctx);
  cl_int err;
  cl_context other = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
  assert_int_equal(err, CL_SUCCESS);
  cl_command_queue oq = clCreateCommandQueue(other, dev, 0, &err);
  assert_int_equal(err, CL_SUCCESS);
  cl_mem foreign = filled(other, oq, 0);
  for (int op = 0; op < N_OPS; op++) {
    cl_mem m[24];
    for (int i = 0; i < op_nbuf[op]; i++) m[i] = filled(c, q, i < op_first_out[op] ? 0 : 0x5A);
    TU_OK(run_op(ctx, op, m, NULL)); /* all of this context: fine */
    TU_OK(camdelta_finish(ctx));
    for (int i = 0; i < op_nbuf[op]; i++) {
      if (op == OP_SCAN && i == 6) continue;
      cl_mem keep = m[i];
      m[i] = foreign;
      for (int k = op_first_out[op]; k < op_nbuf[op]; k++) {
        if (k == i) continue;
        clReleaseMemObject(m[k]);
        m[k] = filled(c, q, 0x5A);
      }
      assert_int_equal(run_op(ctx, op, m, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT);
      if (!strstr(camdelta_last_message(), "another OpenCL context"))
        fail_msg("%s slot %d: %s", op_names[op], i, camdelta_last_message());
      TU_OK(camdelta_finish(ctx));
      outputs_untouched(q, op, m, foreign);
      m[i] = keep;
    }
    for (int i = 0; i < op_nbuf[op]; i++) clReleaseMemObject(m[i]);
  }
  clReleaseMemObject(foreign);
  clReleaseCommandQueue(oq);
  clReleaseContext(other);
}

/* A profile requested on a queue without profiling: rejected by every operation before any kernel runs (issue
 * 11: only prep forward checked; the others ran their kernels, then failed). */
static void test_profile_needs_profiling_queue(void **state) {
  (void)state;
  cl_device_id dev = camdelta_context_device(tu_context());
  cl_int err;
  cl_context c = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
  assert_int_equal(err, CL_SUCCESS);
  cl_command_queue q = clCreateCommandQueue(c, dev, 0, &err);
  assert_int_equal(err, CL_SUCCESS);
  camdelta_context *ctx = NULL;
  TU_OK(camdelta_context_create_from_queue(&ctx, c, q));
  for (int op = 0; op < N_OPS; op++) {
    cl_mem m[24];
    for (int i = 0; i < op_nbuf[op]; i++) m[i] = filled(c, q, i < op_first_out[op] ? 0 : 0x5A);
    camdelta_profile prof = {0, 0};
    assert_int_equal(run_op(ctx, op, m, &prof), CAMDELTA_ERROR_INVALID_ARGUMENT);
    if (!strstr(camdelta_last_message(), "CL_QUEUE_PROFILING_ENABLE"))
      fail_msg("%s: %s", op_names[op], camdelta_last_message());
    TU_OK(camdelta_finish(ctx));
    outputs_untouched(q, op, m, NULL);
    TU_OK(run_op(ctx, op, m, NULL)); /* without a profile it runs */
    for (int i = 0; i < op_nbuf[op]; i++) clReleaseMemObject(m[i]);
  }
  camdelta_context_destroy(ctx);
  clReleaseCommandQueue(q);
  clReleaseContext(c);
}

/* camdelta_enqueue_marker: an application's second queue waits for camdelta's work through the event. */
static void test_marker_event(void **state) {
  (void)state;
  camdelta_context *ctx = tu_context();
  cl_context c = camdelta_context_cl_context(ctx);
  cl_device_id dev = camdelta_context_device(ctx);
  cl_int err;
  cl_command_queue other = clCreateCommandQueue(c, dev, 0, &err);
  assert_int_equal(err, CL_SUCCESS);
  prep_problem p;
  prep_problem_init(&p, 1, 300, 4, 64, CAMDELTA_F32, 77, 0);
  const size_t BNHD = p.B * p.N * p.H * p.D;
  cl_mem in[9], out[4];
  for (int i = 0; i < 9; i++) {
    in[i] = clCreateBuffer(c, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, p.count[i] * 4, p.in[i], &err);
    assert_int_equal(err, CL_SUCCESS);
  }
  for (int o = 0; o < 4; o++) {
    out[o] = clCreateBuffer(c, CL_MEM_READ_WRITE, (o < 3 ? BNHD : p.H * p.N) * 4, NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
  }
  camdelta_prep_args a = CAMDELTA_PREP_ARGS_INIT;
  a.B = p.B, a.N = p.N, a.H = p.H, a.D = p.D, a.dtype = p.dtype, a.k_scale = p.k_scale, a.norm_eps = p.norm_eps;
  camdelta_buffer *slots[13] = {&a.q_raw, &a.k_raw, &a.v_raw, &a.q_norm_weight, &a.k_norm_weight, &a.proj_q,
                                &a.proj_kv, &a.rope_cos, &a.rope_sin, &a.q, &a.k, &a.v, &a.inflation_sq};
  for (int i = 0; i < 13; i++) slots[i]->mem = i < 9 ? in[i] : out[i - 9];
  TU_OK(camdelta_prep_forward(ctx, &a, NULL));
  cl_event ev = NULL;
  TU_OK(camdelta_enqueue_marker(ctx, &ev));
  assert_non_null(ev);
  float *qh = malloc(BNHD * 4);
  /* a non-blocking read on the other queue, ordered only by the event */
  assert_int_equal(clEnqueueReadBuffer(other, out[0], CL_FALSE, 0, BNHD * 4, qh, 1, &ev, NULL), CL_SUCCESS);
  assert_int_equal(clFinish(other), CL_SUCCESS);
  cl_int status = -1;
  assert_int_equal(clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL), CL_SUCCESS);
  assert_int_equal(status, CL_COMPLETE);
  double *rq;
  prep_problem_reference(&p, &rq, NULL, NULL, NULL);
  assert_true(tu_rel_err(qh, rq, BNHD) < 1e-6);
  clReleaseEvent(ev);
  assert_int_equal(camdelta_enqueue_marker(ctx, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_int_equal(camdelta_enqueue_marker(NULL, &ev), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_null(ev);
  free(qh), free(rq);
  for (int i = 0; i < 9; i++) clReleaseMemObject(in[i]);
  for (int o = 0; o < 4; o++) clReleaseMemObject(out[o]);
  clReleaseCommandQueue(other);
  prep_problem_free(&p);
}

/* CAMDELTA_DEVICE_LIMITS lowers what the context reports (never raises it); a bad list fails the creation. */
static void test_device_limits(void **state) {
  (void)state;
  camdelta_device_info real, low;
  TU_OK(camdelta_context_info(tu_context(), &real));
  tu_context_release();
  setenv("CAMDELTA_DEVICE_LIMITS", "local=16384,wg=64,cu=1", 1);
  TU_OK(camdelta_context_info(tu_context(), &low));
  assert_true(low.local_mem_bytes == (real.local_mem_bytes < 16384 ? real.local_mem_bytes : 16384));
  assert_true(low.max_work_group_size == (real.max_work_group_size < 64 ? real.max_work_group_size : 64));
  assert_true(low.compute_units == 1);
  tu_context_release();
  setenv("CAMDELTA_DEVICE_LIMITS", "wg=1099511627776", 1); /* above the device: ignored */
  TU_OK(camdelta_context_info(tu_context(), &low));
  assert_true(low.max_work_group_size == real.max_work_group_size);
  unsetenv("CAMDELTA_DEVICE_LIMITS");
  static const char *const bad[] = {"local", "local=", "local=0", "wg=-1", "wg=1e3", "cu=2x", "threads=4",
                                    "local=1,,wg=2", "wg=1099511627777"};
  tu_check_bad_env("CAMDELTA_DEVICE_LIMITS", bad, sizeof bad / sizeof bad[0]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_device_limits),
      cmocka_unit_test(test_version),
      cmocka_unit_test(test_selectors),
      cmocka_unit_test(test_borrowed_queue),
      cmocka_unit_test(test_threads),
      cmocka_unit_test(test_foreign_buffers),
      cmocka_unit_test(test_profile_needs_profiling_queue),
      cmocka_unit_test(test_marker_event),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  tu_context_release();
  return rc;
}
