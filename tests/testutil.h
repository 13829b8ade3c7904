/* Shared helpers for the cmocka tests. */
#ifndef CD_TESTUTIL_H
#define CD_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "camdelta.h"
#include "camdelta_helpers.h"
#include "camdelta_npy.h"
#include "camdelta_ref.h"

/** The test context: one per process, on CAMDELTA_DEVICE (default device). */
camdelta_context *tu_context(void);
void tu_context_release(void);
/** A second context on tu_context()'s queue created with CAMDELTA_TC=emulate (read at creation): the tensor-core
 *  kernels' logic on any device. The caller destroys it. */
camdelta_context *tu_context_tc_emulated(void);

/** Deterministic random numbers (xorshift); seed per test. */
void tu_seed(uint64_t seed);
double tu_uniform(double lo, double hi);
double tu_normal(void);
void tu_fill_uniform(float *x, size_t n, double lo, double hi);
void tu_fill_normal(float *x, size_t n, double scale);

/** A new OpenCL context on the test context's device and an in-order queue on it without profiling (the caller
 *  releases both). Failures fail the test. */
void tu_other_cl_context(cl_context *c, cl_command_queue *q);

/** Device buffers. Failures fail the test. */
cl_mem tu_buffer(size_t bytes);                              /* poisoned with 0xFF bytes (NaN) */
cl_mem tu_upload(const void *host, size_t bytes);
/* `elems` elements of `es` bytes placed `offset` elements into a new buffer (for the element offsets of
 * camdelta_buffer); the `offset` elements before them are bytes `fill` (0xFF: NaN in every float type). */
cl_mem tu_upload_at(const void *host, size_t elems, size_t es, size_t offset, unsigned char fill);
void tu_download(cl_mem mem, size_t byte_offset, size_t bytes, void *host);
size_t tu_mem_size(cl_mem mem);

/** Conversions. */
double *tu_to_f64(const float *x, size_t n);                 /* malloc'd */
void tu_round_to(camdelta_dtype dt, float *x, size_t n);     /* in place: round-trip through dt */
void *tu_pack(camdelta_dtype dt, const float *x, size_t n);  /* malloc'd storage of dt */
void tu_unpack(camdelta_dtype dt, const void *src, float *dst, size_t n);

/** max|x - ref| / max(max|ref|, 1e-30). NaN in x gives +inf. */
double tu_rel_err(const float *x, const double *ref, size_t n);
/** Same for two double arrays. */
double tu_rel_err64(const double *x, const double *ref, size_t n);

/** Assert status OK, printing camdelta_last_message() otherwise. */
#define TU_OK(expr)                                                                           \
  do {                                                                                        \
    camdelta_status tu_st_ = (expr);                                                          \
    if (tu_st_ != CAMDELTA_OK)                                                                \
      fail_msg("%s -> %s: %s", #expr, camdelta_status_name(tu_st_), camdelta_last_message()); \
  } while (0)

/** Print a "[ measure ]" line (collected by gpu-lab/gpu-test.sh for notes). */
void tu_report(const char *what, double value);
/** tu_report of the n worst errors as "<prefix> max rel err <names[i]>", then resets them to 0. */
void tu_report_worst(const char *prefix, const char *const *names, double *worst, int n);

/** Path of a fresh temporary folder for this test process. */
const char *tu_tmpdir(void);
/** A fresh, empty folder NAME under tu_tmpdir() (an old one is removed); the path stays valid for 8 calls. */
const char *tu_fresh_dir(const char *name);
/** The file's first size-1 bytes into buf as a string ("" when it cannot be read). */
void tu_slurp(const char *path, char *buf, size_t size);
/** The whole file at path (fails the test when it cannot be read): a malloc'ed buffer of *len bytes (+1 spare). */
unsigned char *tu_read_file(const char *path, size_t *len);
/** Writes b[0..len) to path, replacing it (fails the test on an error). */
void tu_write_file(const char *path, const void *b, size_t len);
/** Runs the tool `cli` (a path) with the shell word list made of fmt and ap, as
 *  "PREFIX 'CLI' ARGS >OUT 2>ERR </dev/null" (prefix: environment assignments or a `timeout`, may be NULL), its
 *  stdout and stderr read into out and err (NULL: not kept) and the argument text into args (NULL: not kept).
 *  Returns the exit code, 128 + the signal for a killed process. */
int tu_run_cli(const char *prefix, const char *cli, char *args, size_t args_size, char *out, size_t out_size,
               char *err, size_t err_size, const char *fmt, va_list ap);
/** Fails the test naming `what` when the first `bytes` bytes of two device buffers differ. */
void tu_assert_same_bytes(cl_mem a, cl_mem b, size_t bytes, const char *what);

/** Each value bad[i] of environment variable var must make camdelta_context_create fail with
 *  CAMDELTA_ERROR_INVALID_ARGUMENT, no context and a message naming var (overrides read at creation). Releases the
 *  test context first and unsets var at the end. */
void tu_check_bad_env(const char *var, const char *const *bad, size_t n);

/** Sets environment variable var to value (NULL: unsets it) and releases the test context, so that the next
 *  tu_context() reads it (the library reads its variables at context creation). */
void tu_env_context(const char *var, const char *value);
/** camdelta_tune_set(ctx, family, list) must fail with CAMDELTA_ERROR_INVALID_ARGUMENT and (unless needle is NULL) a
 *  message holding needle. */
void tu_tune_refused(camdelta_context *ctx, const char *family, const char *list, const char *needle);
/** Environment variable var as it is now (malloc'd; NULL where unset), to give back with tu_env_context. */
char *tu_env_saved(const char *var);
/** CAMDELTA_DEVICE_LIMITS as it is now (tu_env_saved), for tu_limits_env and tu_limits_restore. */
char *tu_limits_saved(void);
/** Sets CAMDELTA_DEVICE_LIMITS to `was` (NULL: nothing) with `extra` appended after a comma (NULL: nothing), unset
 *  where both are empty, and releases the test context so that the next tu_context() reads it. */
void tu_limits_env(const char *was, const char *extra);
/** tu_limits_env(was, NULL), then frees was (from tu_limits_saved). */
void tu_limits_restore(char *was);
/** The scan's work-group forms on any device (CAMDELTA_SCAN_CPU=0, the context recreated); returns the variable's
 *  value before, for tu_scan_cpu_restore. */
char *tu_scan_cpu_off(void);
/** CAMDELTA_SCAN_CPU back to was (from tu_scan_cpu_off; the context recreated), then frees was. */
void tu_scan_cpu_restore(char *was);

/** A scan problem's sizes and host inputs (B, H, head dim D, F frames of S tokens, N = F*S). */
typedef struct tu_scan_host {
  size_t B, H, D, F, S, N;
  size_t tok, gates, bhf, st; /* element counts: B*H*D*N, B*H*N, B*H*F, B*H*D*D */
  /* q uniform in [-1, 1], k normal with sd 1/sqrt(D*S) as the model's k_scale makes it, v and grad_out (go) normal
   * (tok values each); beta uniform in [0, 1] (gates); decay uniform in [0.6, 1] (bhf); init and gf, an
   * init_state and a grad_final_state (st each), normal with the sds given */
  float *q, *k, *v, *go, *beta, *decay, *init, *gf;
} tu_scan_host;
/** A new problem in p (malloc'd inputs), the generator seeded with `seed` first; init and gf with sd state_sd[0]
 *  and state_sd[1]. */
void tu_scan_host_make(tu_scan_host *p, size_t B, size_t H, size_t D, size_t F, size_t S, const double state_sd[2],
                       uint64_t seed);
void tu_scan_host_free(tu_scan_host *p);

/** A cmocka group teardown that releases the test context. */
int tu_teardown_context(void **state);

/** The test program's main(): runs the cmocka tests listed (cmocka_unit_test(...) entries) as one group with the
 *  group setup and teardown given (NULL: none; tu_teardown_context releases the test context). */
#define TU_MAIN(setup, teardown, ...)                           \
  int main(void) {                                              \
    const struct CMUnitTest tests[] = {__VA_ARGS__};            \
    return cmocka_run_group_tests(tests, setup, teardown);      \
  }

#endif
