/* Contexts: device selection, borrowed queues, versions, threads. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>

#include "runtime/internal.h"
#include "ops/prep_common.h"
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

/* The prep forward's nine inputs (p's data) and four outputs (q, k, v, inflation_sq) as buffers of `clctx`. */
static void prep_buffers(cl_context clctx, const prep_problem *p, cl_mem in[9], cl_mem out[4]) {
  const size_t BNHD = p->B * p->N * p->H * p->D;
  cl_int err;
  for (int i = 0; i < 9; i++) {
    in[i] = clCreateBuffer(clctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, p->count[i] * 4, p->in[i], &err);
    assert_int_equal(err, CL_SUCCESS);
  }
  for (int o = 0; o < 4; o++) {
    out[o] = clCreateBuffer(clctx, CL_MEM_READ_WRITE, (o < 3 ? BNHD : p->H * p->N) * 4, NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
  }
}

/* Runs a prep forward with `ctx` and checks q against the reference. */
static void prep_check(camdelta_context *ctx, cl_context clctx, cl_command_queue queue, uint64_t seed) {
  prep_problem p;
  prep_problem_init(&p, 1, 50, 3, 32, CAMDELTA_F32, seed, 0);
  const size_t BNHD = p.B * p.N * p.H * p.D;
  cl_mem in[9], out[4];
  prep_buffers(clctx, &p, in, out);
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
  cl_device_id dev = camdelta_context_device(tu_context());
  cl_int err;
  cl_context clctx;
  cl_command_queue q;
  tu_other_cl_context(&clctx, &q);
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
 * (CAMDELTA_PREP_FUSED is read at context creation): each program is built once, as many as one thread builds
 * (`programs` on a device whose kernels take the first tiles tried; where a built kernel allows fewer work-items,
 * e.g. Rusticl's 32, the plans build smaller variants too). */
static void threads_with(const char *form, unsigned programs) {
  setenv("CAMDELTA_PREP_FUSED", form, 1);
  camdelta_context *ctx = NULL;
  TU_OK(camdelta_context_create(&ctx, NULL));
  prep_check(ctx, camdelta_context_cl_context(ctx), camdelta_context_queue(ctx), 99);
  camdelta_build_stats one;
  TU_OK(camdelta_context_build_stats(ctx, &one));
  camdelta_context_destroy(ctx);
  if (one.programs != programs) {
    cl_kernel k;
    size_t ts;
    assert_true(one.programs > programs);
    TU_OK(camdelta_context_create(&ctx, NULL));
    TU_OK(cd_prep_kernel(ctx, "prep.cl", "cd_prep_forward", CAMDELTA_F32, 32, &k, &ts));
    assert_true(cd_kernel_max_wg(ctx, k) < 32 * (32 / 4)); /* only where the first tiles (32 tokens) did not fit */
    clReleaseKernel(k);
    camdelta_context_destroy(ctx);
    programs = one.programs;
  }
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

/* The entry prologue's checks of every public entry (foreign buffers, profiling, NULL, saved objects) are
 * tests/test_contract.c's. */

/* camdelta_enqueue_marker: an application's second queue waits for camdelta's work through the event. */
/* A platform with no device (Mesa's Clover without a GPU, installed beside Rusticl by mesa-opencl-icd) is harmless:
 * the default choice skips it, naming it fails cleanly with the devices there are, and `camdelta info` lists it. */
static void test_platform_without_devices(void **state) {
  (void)state;
  cl_platform_id ps[16];
  cl_uint np = 0;
  assert_int_equal(clGetPlatformIDs(16, ps, &np), CL_SUCCESS);
  int seen = 0;
  for (cl_uint p = 0; p < np && p < 16; p++) {
    cl_uint nd = 0;
    const cl_int err = clGetDeviceIDs(ps[p], CL_DEVICE_TYPE_ALL, 0, NULL, &nd);
    if (err == CL_SUCCESS && nd > 0) continue;
    char name[128] = "";
    assert_int_equal(clGetPlatformInfo(ps[p], CL_PLATFORM_NAME, sizeof name, name, NULL), CL_SUCCESS);
    seen++;
    /* named: no device of that platform, a clear refusal listing the devices there are */
    camdelta_context *ctx = (camdelta_context *)1;
    char sel[64];
    snprintf(sel, sizeof sel, "%u:0", p);
    assert_int_equal(camdelta_context_create(&ctx, sel), CAMDELTA_ERROR_DEVICE_NOT_FOUND);
    assert_null(ctx);
    assert_non_null(strstr(camdelta_last_message(), "devices there are"));
    /* by default: another platform's device */
    camdelta_context *def = NULL;
    TU_OK(camdelta_context_create(&def, NULL));
    camdelta_device_info info;
    TU_OK(camdelta_context_info(def, &info));
    assert_string_not_equal(info.platform_name, name);
    camdelta_context_destroy(def);
    /* listed by `camdelta info` as a platform without devices */
    const char *cli = getenv("CAMDELTA_CLI");
    if (cli && *cli) {
      char cmd[1400], out[1200];
      snprintf(out, sizeof out, "%s/info.txt", tu_tmpdir());
      snprintf(cmd, sizeof cmd, "'%s' info >'%s' 2>&1", cli, out);
      assert_int_equal(system(cmd), 0);
      char text[16384];
      tu_slurp(out, text, sizeof text);
      if (!strstr(text, name) || !strstr(text, "no devices")) fail_msg("camdelta info does not list '%s':\n%s", name, text);
    }
  }
  if (!seen) print_message("no platform without devices here (Clover is one, from mesa-opencl-icd): nothing checked\n");
}

/* Where the driver gives no kernel times (Rusticl's profiling timer has no resolution; emulated with
 * CAMDELTA_DEVICE_LIMITS profiling=0) a requested profile still counts the kernels and waits for them, and its
 * kernel_ms is NaN, not a made-up 0. */
static void test_profile_without_kernel_times(void **state) {
  (void)state;
  char *was = tu_limits_saved();
  tu_limits_env(was, "profiling=0");
  camdelta_context *ctx = tu_context();
  prep_problem p;
  prep_problem_init(&p, 1, 20, 2, 16, CAMDELTA_F32, 78, 0);
  const size_t BNHD = p.B * p.N * p.H * p.D;
  cl_mem in[9], out[4];
  for (int i = 0; i < 9; i++) in[i] = tu_upload(p.in[i], p.count[i] * 4);
  for (int o = 0; o < 4; o++) out[o] = tu_buffer((o < 3 ? BNHD : p.H * p.N) * 4);
  camdelta_profile prof = {1.0, 0};
  camdelta_prep_args a = CAMDELTA_PREP_ARGS_INIT;
  a.B = p.B, a.N = p.N, a.H = p.H, a.D = p.D, a.dtype = p.dtype, a.k_scale = p.k_scale, a.norm_eps = p.norm_eps;
  camdelta_buffer *slots[13] = {&a.q_raw, &a.k_raw, &a.v_raw, &a.q_norm_weight, &a.k_norm_weight, &a.proj_q,
                                &a.proj_kv, &a.rope_cos, &a.rope_sin, &a.q, &a.k, &a.v, &a.inflation_sq};
  for (int i = 0; i < 13; i++) slots[i]->mem = i < 9 ? in[i] : out[i - 9];
  a.profile = &prof;
  TU_OK(camdelta_prep_forward(ctx, &a, NULL));
  assert_true(isnan(prof.kernel_ms));
  assert_true(prof.kernels >= 1);
  for (int i = 0; i < 9; i++) clReleaseMemObject(in[i]);
  for (int o = 0; o < 4; o++) clReleaseMemObject(out[o]);
  prep_problem_free(&p);
  tu_limits_restore(was);
}

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
  prep_buffers(c, &p, in, out);
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

TU_MAIN(NULL, tu_teardown_context,
      cmocka_unit_test(test_device_limits),
      cmocka_unit_test(test_version),
      cmocka_unit_test(test_selectors),
      cmocka_unit_test(test_borrowed_queue),
      cmocka_unit_test(test_threads),
      cmocka_unit_test(test_marker_event),
      cmocka_unit_test(test_profile_without_kernel_times),
      cmocka_unit_test(test_platform_without_devices))
