/* camdelta run scan|scan-backward over packed clips (docs/math.md §7 and §9): the --in folder holds
 * frame_offsets.npy (int64, F+1) and clip_offsets.npy (int64, clips+1) beside the packed tensors
 *   q k v (1, H, D, N), beta (1, H, N), decay (1, H, F), optional init_state (clips, H, D, D);
 *   scan-backward also grad_out (1, H, D, N) and optional grad_final_state (clips, H, D, D).
 * Outputs: out (1, H, D, N) and with --final-state final_state (clips, H, D, D); scan-backward: dq dk dv
 * (1, H, D, N), dbeta (1, H, N), ddecay (1, H, F), dinit_state (clips, H, D, D) when init_state is given. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "camdelta_packed.h"
#include "cli_common.h"
#include "cli_packed.h"

static int exists(const char *dir, const char *name) {
  char path[4096];
  struct stat sb;
  snprintf(path, sizeof path, "%s/%s.npy", dir, name);
  return stat(path, &sb) == 0;
}

int cli_packed_requested(const char *in) { return in && (exists(in, "frame_offsets") || exists(in, "clip_offsets")); }

static int load_offsets(const char *dir, const char *name, int64_t **v, size_t *n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.npy", dir, name);
  if (!exists(dir, name))
    return cli_error(CLI_EXIT_INPUT, "%s: missing input file (packed clips need both frame_offsets and clip_offsets, "
                     "1-D <i8 arrays)", path);
  camdelta_status st = camdelta_npy_read_i64(path, v, n);
  if (st) return cli_error(CLI_EXIT_INPUT, "%s", camdelta_last_message());
  if (*n < 2) return cli_error(CLI_EXIT_INPUT, "%s: expected at least 2 offsets, got %zu", path, *n);
  return CLI_EXIT_OK;
}


int cmd_run_packed(int backward, const char *in, const char *outdir, const char *device, int reverse,
                   camdelta_scan_algorithm alg, int final_state, int quiet) {
  const char *op = backward ? "scan-backward" : "scan";
  int64_t *fo = NULL, *co = NULL;
  size_t nfo = 0, nco = 0;
  cli_tensor t[CLI_SCAN_COUNT];
  memset(t, 0, sizeof t);
  camdelta_context *ctx = NULL;
  cl_mem mem[CLI_SCAN_COUNT] = {NULL};
  cli_output out[6];
  int no = 0;
  int rc = load_offsets(in, "frame_offsets", &fo, &nfo);
  if (!rc) rc = load_offsets(in, "clip_offsets", &co, &nco);
  size_t H = 0, D = 0, N = 0;
  const size_t F = nfo ? nfo - 1 : 0, clips = nco ? nco - 1 : 0;
  if (!rc) rc = cli_tensor_load(&t[CLI_SCAN_Q], in, "q", 0, "(1, H, D, N)");
  if (!rc) rc = cli_tensor_convert(&t[CLI_SCAN_Q], CAMDELTA_NPY_F4);
  if (!rc) {
    const size_t *s = t[CLI_SCAN_Q].npy.shape;
    if (t[CLI_SCAN_Q].npy.ndim != 4 || s[0] != 1) {
      char have[256];
      rc = cli_error(CLI_EXIT_INPUT, "%s: shape %s does not fit: packed clips expect (1, H, D, N)", t[CLI_SCAN_Q].path,
                     cli_shape_str(have, sizeof have, t[CLI_SCAN_Q].npy.ndim, s));
    } else {
      H = s[1], D = s[2], N = s[3];
    }
  }
  const size_t tok[4] = {1, H, D, N}, bt[3] = {1, H, N}, dc[3] = {1, H, F}, st4[4] = {clips, H, D, D};
  if (!rc) rc = cli_tensor_load_f32(&t[CLI_SCAN_BETA], in, "beta", 0, 3, bt, "(1, H, N)");
  if (!rc)
    rc = cli_load_scan_inputs(t, in, backward, tok, "(1, H, D, N)", dc, "(1, H, F) with F + 1 = len(frame_offsets)",
                              st4, "(clips, H, D, D)");
  if (!rc) rc = cli_context(&ctx, device);
  for (int i = 0; i < CLI_SCAN_COUNT && !rc; i++)
    if (t[i].present) rc = cli_upload(ctx, &t[i], &mem[i]);
  const int has_init = t[CLI_SCAN_INIT].present;
  if (!backward) {
    if (!rc) rc = cli_output_alloc(ctx, &out[no++], "out", CAMDELTA_NPY_F4, 4, tok);
    if (!rc && final_state) rc = cli_output_alloc(ctx, &out[no++], "final_state", CAMDELTA_NPY_F4, 4, st4);
  } else {
    const char *const names[5] = {"dq", "dk", "dv", "dbeta", "ddecay"};
    const size_t *const shapes[5] = {tok, tok, tok, bt, dc};
    for (int i = 0; i < 5 && !rc; i++)
      rc = cli_output_alloc(ctx, &out[no++], names[i], CAMDELTA_NPY_F4, i < 3 ? 4 : 3, shapes[i]);
    if (!rc && has_init) rc = cli_output_alloc(ctx, &out[no++], "dinit_state", CAMDELTA_NPY_F4, 4, st4);
  }
  camdelta_profile prof = {0, 0};
  camdelta_scan_algorithm used = alg;
  if (!rc) {
    const camdelta_packed_clips pc = {.frame_offsets = fo, .clip_offsets = co, .clips = clips, .tokens = N};
    camdelta_status st;
    if (!backward) {
      camdelta_scan_args a;
      memset(&a, 0, sizeof a);
      a.B = 1, a.H = H, a.D = D, a.F = F, a.S = 0, a.reverse = reverse, a.algorithm = alg, a.used = &used;
      a.q.mem = mem[CLI_SCAN_Q], a.k.mem = mem[CLI_SCAN_K], a.v.mem = mem[CLI_SCAN_V], a.beta.mem = mem[CLI_SCAN_BETA];
      a.decay.mem = mem[CLI_SCAN_DECAY], a.init_state.mem = mem[CLI_SCAN_INIT], a.out.mem = out[0].mem;
      if (final_state) a.final_state.mem = out[1].mem;
      a.profile = &prof;
      st = camdelta_scan_forward_packed(ctx, &a, &pc, NULL);
    } else {
      camdelta_scan_backward_args a;
      memset(&a, 0, sizeof a);
      a.B = 1, a.H = H, a.D = D, a.F = F, a.S = 0, a.reverse = reverse;
      a.q.mem = mem[CLI_SCAN_Q], a.k.mem = mem[CLI_SCAN_K], a.v.mem = mem[CLI_SCAN_V], a.beta.mem = mem[CLI_SCAN_BETA];
      a.decay.mem = mem[CLI_SCAN_DECAY], a.init_state.mem = mem[CLI_SCAN_INIT], a.grad_out.mem = mem[CLI_SCAN_GO];
      a.grad_final_state.mem = mem[CLI_SCAN_GF];
      a.dq.mem = out[0].mem, a.dk.mem = out[1].mem, a.dv.mem = out[2].mem, a.dbeta.mem = out[3].mem;
      a.ddecay.mem = out[4].mem;
      if (has_init) a.dinit_state.mem = out[5].mem;
      a.profile = &prof;
      st = camdelta_scan_backward_packed(ctx, &a, &pc, NULL);
    }
    if (!st) st = camdelta_finish(ctx);
    if (st) rc = cli_lib_error(st, backward ? "camdelta_scan_backward_packed" : "camdelta_scan_forward_packed");
  }
  if (!rc) rc = cli_write_outputs(ctx, outdir, out, no);
  if (!rc && !quiet) {
    char ms[48] = "no kernel times from the driver";
    if (!isnan(prof.kernel_ms)) snprintf(ms, sizeof ms, "%.3f ms", prof.kernel_ms);
    printf("camdelta run %s: %zu packed clips, %zu frames, N=%zu tokens, H=%zu D=%zu %s%s%s: %s in %u kernels; "
           "wrote", op, clips, F, N, H, D, reverse ? "reverse" : "causal", has_init ? " from init_state" : "",
           backward ? "" : (used == CAMDELTA_SCAN_CHUNKWISE ? ", chunkwise" : ", sequential"), ms, prof.kernels);
    for (int i = 0; i < no; i++) printf(" %s", out[i].name);
    printf(" to %s\n", outdir);
  }
  for (int i = 0; i < CLI_SCAN_COUNT; i++) {
    cli_tensor_free(&t[i]);
    if (mem[i]) clReleaseMemObject(mem[i]);
  }
  for (int i = 0; i < no; i++)
    if (out[i].mem) clReleaseMemObject(out[i].mem);
  camdelta_context_destroy(ctx);
  free(fo), free(co);
  return rc;
}
