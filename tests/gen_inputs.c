/* Writes random inputs for one `camdelta run` operation as .npy files (for the oclgrind CI step, ci/oclgrind.sh):
 *   cd_gen_inputs prep|prep-backward B N H D DIR
 *   cd_gen_inputs scan|scan-backward|scan-masked|scan-backward-masked B H D F S DIR   (-masked: beta and decay
 *       zero at odd frames, as the camera branch's masked reverse scan gets them)
 *   cd_gen_inputs scan-packed|scan-backward-packed H D CLIPS DIR   (CLIPS: FxS,FxS,... one clip of F frames of S
 *                                                                    tokens each; packed layout, docs/math.md §9)
 *   cd_gen_inputs branch B T Hs Ws H D DIR   the inputs of every camera-branch operation: camera_conditions (poses
 *       near the identity), k_raw and conv_weight (short-conv), out proj_o rope_cos rope_sin (output-transform), and
 *       q_raw v_raw q_norm_weight k_norm_weight beta decay grad_y (branch, branch-backward)
 * Values are deterministic (xorshift) and in the ranges the tests use; prep-backward and scan-backward also get
 * every optional upstream gradient, and the scans an init_state. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "camdelta_npy.h"

static uint64_t g_s = 0x9E3779B97F4A7C15ull;
static float uni(float lo, float hi) {
  g_s ^= g_s << 13, g_s ^= g_s >> 7, g_s ^= g_s << 17;
  return lo + (hi - lo) * (float)((g_s >> 40) / 16777216.0);
}

/* When nonzero, put() zeroes every odd run of g_masked consecutive values (frames of a masked scan's gates). */
static size_t g_masked;

static int put(const char *dir, const char *name, int ndim, const size_t *shape, float lo, float hi) {
  size_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  float *x = malloc((n ? n : 1) * sizeof *x);
  if (!x) return 1;
  for (size_t i = 0; i < n; i++) x[i] = g_masked && (i / g_masked) % 2 == 1 ? 0.0f : uni(lo, hi);
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.npy", dir, name);
  camdelta_status st = camdelta_npy_write(path, CAMDELTA_NPY_F4, ndim, shape, x);
  free(x);
  if (st) fprintf(stderr, "cd_gen_inputs: %s\n", camdelta_last_message());
  return st != CAMDELTA_OK;
}

static size_t num(const char *s) {
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  if (*end || v == 0 || s[0] == '-') {
    fprintf(stderr, "cd_gen_inputs: '%s' is not a positive integer\n", s);
    exit(2);
  }
  return (size_t)v;
}

int main(int argc, char **argv) {
  if (argc >= 7 && (!strcmp(argv[1], "prep") || !strcmp(argv[1], "prep-backward"))) {
    const size_t B = num(argv[2]), N = num(argv[3]), H = num(argv[4]), D = num(argv[5]);
    const char *dir = argv[6];
    const size_t bnhd[4] = {B, N, H, D}, c[1] = {H * D}, bn44[4] = {B, N, 4, 4}, ndh[2] = {N, D / 2};
    const size_t bhdn[4] = {B, H, D, N}, bhn[3] = {B, H, N};
    int rc = put(dir, "q_raw", 4, bnhd, -1, 1) | put(dir, "k_raw", 4, bnhd, -1, 1) | put(dir, "v_raw", 4, bnhd, -1, 1) |
             put(dir, "q_norm_weight", 1, c, 0.5f, 1.5f) | put(dir, "k_norm_weight", 1, c, 0.5f, 1.5f) |
             put(dir, "proj_q", 4, bn44, -1, 1) | put(dir, "proj_kv", 4, bn44, -1, 1) |
             put(dir, "rope_cos", 2, ndh, -1, 1) | put(dir, "rope_sin", 2, ndh, -1, 1);
    if (!strcmp(argv[1], "prep-backward"))
      rc |= put(dir, "grad_q", 4, bhdn, -1, 1) | put(dir, "grad_k", 4, bhdn, -1, 1) |
            put(dir, "grad_v", 4, bhdn, -1, 1) | put(dir, "grad_inflation_sq", 3, bhn, -1, 1);
    return rc;
  }
  if (argc >= 8 && (!strcmp(argv[1], "scan") || !strcmp(argv[1], "scan-backward") || !strcmp(argv[1], "scan-masked") ||
                    !strcmp(argv[1], "scan-backward-masked"))) {
    const size_t B = num(argv[2]), H = num(argv[3]), D = num(argv[4]), F = num(argv[5]), S = num(argv[6]);
    const char *dir = argv[7];
    const size_t bhdn[4] = {B, H, D, F * S}, bhfs[4] = {B, H, F, S}, bhf[3] = {B, H, F}, bhdd[4] = {B, H, D, D};
    /* "-masked": the gates of the camera branch's masked reverse scan, beta and decay zero at odd frames
     * (cl/branch.cl cd_branch_discount: br, dr where the mask is 0) */
    const int masked = strstr(argv[1], "-masked") != NULL;
    g_masked = masked ? S : 0;
    int rc = put(dir, "q", 4, bhdn, -0.3f, 0.3f) | put(dir, "k", 4, bhdn, -0.3f, 0.3f) |
             put(dir, "v", 4, bhdn, -1, 1) | put(dir, "beta", 4, bhfs, 0, 1);
    g_masked = g_masked ? 1 : 0;
    rc |= put(dir, "decay", 3, bhf, 0.8f, 1);
    g_masked = 0;
    rc |= put(dir, "init_state", 4, bhdd, -0.1f, 0.1f);
    if (!strncmp(argv[1], "scan-backward", 13))
      rc |= put(dir, "grad_out", 4, bhdn, -1, 1) | put(dir, "grad_final_state", 4, bhdd, -1, 1);
    return rc;
  }
  if (argc >= 6 && (!strcmp(argv[1], "scan-packed") || !strcmp(argv[1], "scan-backward-packed"))) {
    const size_t H = num(argv[2]), D = num(argv[3]);
    const char *dir = argv[5];
    enum { MAXC = 64 };
    size_t cf[MAXC], cs[MAXC], clips = 0, F = 0, N = 0;
    for (const char *p = argv[4]; *p && clips < MAXC;) {
      char *end;
      cf[clips] = (size_t)strtoull(p, &end, 10);
      if (*end != 'x') break;
      cs[clips] = (size_t)strtoull(end + 1, &end, 10);
      if (!cf[clips] || !cs[clips] || (*end && *end != ',')) break;
      F += cf[clips], N += cf[clips] * cs[clips], clips++;
      p = *end ? end + 1 : end;
      if (!*p) {
        int64_t *fo = malloc((F + 1) * 8), *co = malloc((clips + 1) * 8);
        if (!fo || !co) return 1;
        size_t f = 0, n = 0;
        for (size_t c = 0; c < clips; c++) {
          co[c] = (int64_t)f;
          for (size_t i = 0; i < cf[c]; i++, f++) fo[f] = (int64_t)n, n += cs[c];
        }
        fo[F] = (int64_t)N, co[clips] = (int64_t)F;
        char path[4096];
        const size_t nfo[1] = {F + 1}, nco[1] = {clips + 1};
        snprintf(path, sizeof path, "%s/frame_offsets.npy", dir);
        int rc = camdelta_npy_write(path, CAMDELTA_NPY_I8, 1, nfo, fo) != CAMDELTA_OK;
        snprintf(path, sizeof path, "%s/clip_offsets.npy", dir);
        rc |= camdelta_npy_write(path, CAMDELTA_NPY_I8, 1, nco, co) != CAMDELTA_OK;
        free(fo), free(co);
        const size_t hdn[4] = {1, H, D, N}, hn[3] = {1, H, N}, hf[3] = {1, H, F}, cdd[4] = {clips, H, D, D};
        rc |= put(dir, "q", 4, hdn, -0.3f, 0.3f) | put(dir, "k", 4, hdn, -0.3f, 0.3f) | put(dir, "v", 4, hdn, -1, 1) |
              put(dir, "beta", 3, hn, 0, 1) | put(dir, "decay", 3, hf, 0.8f, 1) |
              put(dir, "init_state", 4, cdd, -0.1f, 0.1f);
        if (!strcmp(argv[1], "scan-backward-packed"))
          rc |= put(dir, "grad_out", 4, hdn, -1, 1) | put(dir, "grad_final_state", 4, cdd, -1, 1);
        return rc;
      }
    }
    fprintf(stderr, "cd_gen_inputs: CLIPS '%s' is not FxS,FxS,... (at most %d clips)\n", argv[4], (int)MAXC);
    return 2;
  }
  if (argc >= 9 && !strcmp(argv[1], "branch")) {
    const size_t B = num(argv[2]), T = num(argv[3]), Hs = num(argv[4]), Ws = num(argv[5]), H = num(argv[6]),
                 D = num(argv[7]);
    const char *dir = argv[8];
    const size_t S = Hs * Ws, N = T * S, C = H * D, tok[4] = {B, N, H, D}, c4[2] = {C, 4}, c1[1] = {C},
                 beta[4] = {B, H, T, S}, decay[3] = {B, H, T}, cc[3] = {B, T, 20}, bhdn[4] = {B, H, D, N},
                 bn44[4] = {B, N, 4, 4}, ndh[2] = {N, D / 2};
    int rc = put(dir, "q_raw", 4, tok, -1.5f, 1.5f) | put(dir, "k_raw", 4, tok, -1.5f, 1.5f) |
             put(dir, "v_raw", 4, tok, -1.5f, 1.5f) | put(dir, "conv_weight", 2, c4, -0.6f, 0.6f) |
             put(dir, "q_norm_weight", 1, c1, 0.5f, 1.5f) | put(dir, "k_norm_weight", 1, c1, 0.5f, 1.5f) |
             put(dir, "beta", 4, beta, 0.1f, 0.9f) | put(dir, "decay", 3, decay, 0.5f, 1) |
             put(dir, "grad_y", 4, tok, -1, 1) | put(dir, "out", 4, bhdn, -1, 1) | put(dir, "proj_o", 4, bn44, -1, 1) |
             put(dir, "rope_cos", 2, ndh, -1, 1) | put(dir, "rope_sin", 2, ndh, -1, 1);
    /* cameras: c2w near the identity, focal lengths near the image extent, centres near its middle */
    float *x = malloc(B * T * 20 * sizeof *x);
    if (!x) return 1;
    for (size_t i = 0; i < B * T; i++) {
      float *c = x + i * 20;
      for (int k = 0; k < 16; k++) c[k] = (k % 5 == 0 ? 1.0f : 0.0f) + (k < 12 ? uni(-0.3f, 0.3f) : 0.0f);
      c[16] = (float)Ws * uni(0.8f, 1.2f), c[17] = (float)Hs * uni(0.8f, 1.2f);
      c[18] = (float)Ws * uni(0.4f, 0.6f), c[19] = (float)Hs * uni(0.4f, 0.6f);
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/camera_conditions.npy", dir);
    if (camdelta_npy_write(path, CAMDELTA_NPY_F4, 3, cc, x) != CAMDELTA_OK) {
      fprintf(stderr, "cd_gen_inputs: %s\n", camdelta_last_message());
      rc = 1;
    }
    free(x);
    return rc;
  }
  fprintf(stderr, "usage: cd_gen_inputs prep|prep-backward B N H D DIR\n"
                  "       cd_gen_inputs scan|scan-backward|scan-masked|scan-backward-masked B H D F S DIR\n"
                  "       cd_gen_inputs scan-packed|scan-backward-packed H D FxS,FxS,... DIR\n"
                  "       cd_gen_inputs branch B T Hs Ws H D DIR\n");
  return 2;
}
