/* Helper of tests/mpi/cli_sp.sh (no NumPy needed):
 *   npy_tool gen DIR B H D F S SEED   random scan inputs q k v beta decay grad_out init_state grad_final_state
 *   npy_tool genbranch DIR B T Hs Ws H D SEED   random camera-branch inputs q_raw k_raw v_raw conv_weight
 *       q_norm_weight k_norm_weight camera_conditions beta decay grad_y
 *   npy_tool cmp DIR_A DIR_B TOL NAME...
 *       for each NAME: A/NAME.npy and B/NAME.npy have the same shape and max|a − b| / max|b| <= TOL;
 *       prints the difference; exit 1 when a file is missing, the shapes differ or the bound fails. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "camdelta_npy.h"
#include "tool_cameras.h"

static unsigned long long rng = 1;
static float uni(double lo, double hi) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (float)(lo + (hi - lo) * (double)(rng >> 11) * (1.0 / 9007199254740992.0));
}

static int write_rand(const char *dir, const char *name, int ndim, const size_t *shape, double lo, double hi) {
  size_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  float *x = malloc(n * 4 + 4);
  if (!x) return 1;
  for (size_t i = 0; i < n; i++) x[i] = uni(lo, hi);
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.npy", dir, name);
  camdelta_status st = camdelta_npy_write(path, CAMDELTA_NPY_F4, ndim, shape, x);
  free(x);
  if (st) fprintf(stderr, "%s: %s\n", path, camdelta_last_message());
  return st != CAMDELTA_OK;
}

static int cmp(const char *a, const char *b, double tol, const char *name) {
  char pa[4096], pb[4096];
  snprintf(pa, sizeof pa, "%s/%s.npy", a, name);
  snprintf(pb, sizeof pb, "%s/%s.npy", b, name);
  camdelta_npy x, y;
  if (camdelta_npy_read(pa, &x)) {
    fprintf(stderr, "%s\n", camdelta_last_message());
    return 1;
  }
  if (camdelta_npy_read(pb, &y)) {
    fprintf(stderr, "%s\n", camdelta_last_message());
    camdelta_npy_free(&x);
    return 1;
  }
  int bad = x.ndim != y.ndim || x.count != y.count || x.type != CAMDELTA_NPY_F4 || y.type != CAMDELTA_NPY_F4;
  for (int i = 0; !bad && i < x.ndim; i++) bad = x.shape[i] != y.shape[i];
  double md = 0, mr = 0;
  if (!bad) {
    const float *u = x.data, *v = y.data;
    for (size_t i = 0; i < x.count; i++) {
      const double d = fabs((double)u[i] - v[i]);
      md = isnan(d) ? INFINITY : fmax(md, d);
      mr = fmax(mr, fabs(v[i]));
    }
  }
  const double e = md / fmax(mr, 1e-30);
  printf("%-18s %s: max rel diff %.2e (bound %.0e)\n", name, bad ? "SHAPE MISMATCH" : e <= tol ? "ok" : "FAIL", e, tol);
  camdelta_npy_free(&x), camdelta_npy_free(&y);
  return bad || !(e <= tol);
}

int main(int argc, char **argv) {
  if (argc == 9 && strcmp(argv[1], "gen") == 0) {
    const char *dir = argv[2];
    size_t B = strtoul(argv[3], 0, 10), H = strtoul(argv[4], 0, 10), D = strtoul(argv[5], 0, 10),
           F = strtoul(argv[6], 0, 10), S = strtoul(argv[7], 0, 10);
    rng = strtoull(argv[8], 0, 10) * 0x9E3779B97F4A7C15ull + 7;
    const size_t tok[4] = {B, H, D, F * S}, beta[4] = {B, H, F, S}, decay[3] = {B, H, F}, st[4] = {B, H, D, D};
    const double ks = 1.7 / sqrt((double)D * (double)S);
    return write_rand(dir, "q", 4, tok, -1, 1) || write_rand(dir, "k", 4, tok, -ks, ks) ||
           write_rand(dir, "v", 4, tok, -1, 1) || write_rand(dir, "beta", 4, beta, 0, 1) ||
           write_rand(dir, "decay", 3, decay, 0.6, 1) || write_rand(dir, "grad_out", 4, tok, -1, 1) ||
           write_rand(dir, "init_state", 4, st, -0.5, 0.5) || write_rand(dir, "grad_final_state", 4, st, -0.5, 0.5);
  }
  if (argc == 10 && strcmp(argv[1], "genbranch") == 0) {
    const char *dir = argv[2];
    size_t B = strtoul(argv[3], 0, 10), T = strtoul(argv[4], 0, 10), Hs = strtoul(argv[5], 0, 10),
           Ws = strtoul(argv[6], 0, 10), H = strtoul(argv[7], 0, 10), D = strtoul(argv[8], 0, 10);
    rng = strtoull(argv[9], 0, 10) * 0x9E3779B97F4A7C15ull + 11;
    const size_t S = Hs * Ws, C = H * D, tok[4] = {B, T * S, H, D}, c4[2] = {C, 4}, c1[1] = {C},
                 beta[4] = {B, H, T, S}, decay[3] = {B, H, T}, cc[3] = {B, T, 20};
    if (write_rand(dir, "q_raw", 4, tok, -1.5, 1.5) || write_rand(dir, "k_raw", 4, tok, -1.5, 1.5) ||
        write_rand(dir, "v_raw", 4, tok, -1.5, 1.5) || write_rand(dir, "conv_weight", 2, c4, -0.6, 0.6) ||
        write_rand(dir, "q_norm_weight", 1, c1, 0.5, 1.5) || write_rand(dir, "k_norm_weight", 1, c1, 0.5, 1.5) ||
        write_rand(dir, "beta", 4, beta, 0.1, 0.9) || write_rand(dir, "decay", 3, decay, 0.5, 1) ||
        write_rand(dir, "grad_y", 4, tok, -1, 1))
      return 1;
    /* cameras: c2w near the identity, focal lengths near the image extent, centres near its middle */
    float *x = malloc(B * T * 20 * 4);
    if (!x) return 1;
    tool_cameras(x, B * T, Hs, Ws, uni);
    char path[4096];
    snprintf(path, sizeof path, "%s/camera_conditions.npy", dir);
    const camdelta_status st = camdelta_npy_write(path, CAMDELTA_NPY_F4, 3, cc, x);
    free(x);
    if (st) fprintf(stderr, "%s: %s\n", path, camdelta_last_message());
    return st != CAMDELTA_OK;
  }
  if (argc >= 6 && strcmp(argv[1], "cmp") == 0) {
    int bad = 0;
    for (int i = 5; i < argc; i++) bad |= cmp(argv[2], argv[3], atof(argv[4]), argv[i]);
    return bad;
  }
  fprintf(stderr, "usage: npy_tool gen DIR B H D F S SEED | genbranch DIR B T Hs Ws H D SEED | "
                  "cmp DIR_A DIR_B TOL NAME...\n");
  return 2;
}
