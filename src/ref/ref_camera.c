/* f64 reference of the cameras -> per-token matrices and RoPE tables (docs/math.md §8.1).
 *
 * Per (b, f): c2w = camera_conditions[b, f, 0:16] (row-major), R = c2w[:3,:3], t = c2w[:3,3], focal lengths and
 * centres on the token grid fx/pw, fy/ph, cx/pw, cy/ph. Per token (u, v): the unit ray d in the camera,
 * z = normalize(R d), x = normalize(R[:,1] x z), y = normalize(z x x) (normalize divides by max(|a|, 1e-6)),
 * A = rows x, y, z, P = [[A, -A t], [0, 1]] (ray <- world); a NaN in R d gives P = I. proj_q = P^T,
 * proj_kv = [[A^T, -A^T b], [0, 1]] with b = -A t (the closed-form inverse), proj_o = P. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/branch_common.h"

static void cross3(const double *a, const double *b, double *c) {
  c[0] = a[1] * b[2] - a[2] * b[1];
  c[1] = a[2] * b[0] - a[0] * b[2];
  c[2] = a[0] * b[1] - a[1] * b[0];
}

static void normalize3(double *a) {
  double n = sqrt(a[0] * a[0] + a[1] * a[1] + a[2] * a[2]);
  if (n < 1e-6) n = 1e-6;
  a[0] /= n, a[1] /= n, a[2] /= n;
}

/* P (4x4 row-major) of one token. */
static void ray_matrix(const double *cc, double ph, double pw, double u, double v, double *P) {
  const double fx = cc[16] / pw, fy = cc[17] / ph, cx = cc[18] / pw, cy = cc[19] / ph;
  const double x = (u - cx) / fx, y = (v - cy) / fy, r = sqrt(1.0 + x * x + y * y);
  const double d[3] = {x / r, y / r, 1.0 / r};
  double z[3], cy_axis[3] = {cc[1], cc[5], cc[9]}, xr[3], yr[3];
  int nan = 0;
  for (int i = 0; i < 3; i++) {
    z[i] = cc[4 * i] * d[0] + cc[4 * i + 1] * d[1] + cc[4 * i + 2] * d[2];
    if (isnan(z[i])) nan = 1;
  }
  memset(P, 0, 16 * sizeof *P);
  if (nan) {
    for (int i = 0; i < 4; i++) P[5 * i] = 1.0;
    return;
  }
  normalize3(z);
  cross3(cy_axis, z, xr);
  normalize3(xr);
  cross3(z, xr, yr);
  normalize3(yr);
  const double *rows[3] = {xr, yr, z};
  const double t[3] = {cc[3], cc[7], cc[11]};
  for (int i = 0; i < 3; i++) {
    for (int j = 0; j < 3; j++) P[4 * i + j] = rows[i][j];
    P[4 * i + 3] = -(rows[i][0] * t[0] + rows[i][1] * t[1] + rows[i][2] * t[2]);
  }
  P[15] = 1.0;
}

camdelta_status camdelta_ref_camera_forward(const camdelta_ref_camera *p) {
  static const char op[] = "camdelta_ref_camera_forward";
  cd_clear_error();
  if (!p || !p->camera_conditions)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: '%s' is NULL", op, p ? "camera_conditions" : "p");
  size_t N;
  camdelta_status st = cd_check_grid(op, p->T, p->Hs, p->Ws, &N);
  if (st) return st;
  if (!p->B || !p->ph || !p->pw)
    return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: B=%zu, ph=%zu, pw=%zu: each must be at least 1", op, p->B, p->ph, p->pw);
  if (p->rope_cos || p->rope_sin)
    if ((st = cd_check_head_dim(op, p->D))) return st;
  size_t cams, mats, tables;
  if (!CD_PROD(&cams, p->B, p->T, 20) || !CD_PROD(&mats, p->B, N, 16) || !CD_PROD(&tables, N, p->D))
    return cd_fail(CAMDELTA_ERROR_OVERFLOW, "%s: B*N*16 overflows size_t", op);
  const size_t inf = cd_camera_first_inf_f64(p->camera_conditions, cams);
  if (inf < cams) return cd_camera_inf_error(op, inf, p->T, p->camera_conditions[inf]);
  const size_t S = p->Hs * p->Ws;
  for (size_t b = 0; b < p->B; b++)
    for (size_t n = 0; n < N; n++) {
      const size_t f = n / S, v = (n % S) / p->Ws, u = n % p->Ws;
      double P[16];
      ray_matrix(p->camera_conditions + (b * p->T + f) * 20, (double)p->ph, (double)p->pw, (double)u, (double)v, P);
      const size_t o = (b * N + n) * 16;
      for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
          if (p->proj_q) p->proj_q[o + 4 * i + j] = P[4 * j + i];
          if (p->proj_o) p->proj_o[o + 4 * i + j] = P[4 * i + j];
        }
      if (p->proj_kv) {
        double *Q = p->proj_kv + o;
        memset(Q, 0, 16 * sizeof *Q);
        for (int i = 0; i < 3; i++) {
          double acc = 0;
          for (int j = 0; j < 3; j++) {
            Q[4 * i + j] = P[4 * j + i];
            acc += P[4 * j + i] * P[4 * j + 3];
          }
          Q[4 * i + 3] = -acc;
        }
        Q[15] = 1.0;
      }
    }
  if (p->rope_cos || p->rope_sin) {
    const size_t D = p->D, Dh = D / 2, nq = D / 4;
    double omega[32];
    size_t nt, nh;
    cd_rope_frequencies(D, &nt, &nh, omega);
    for (size_t n = 0; n < N; n++) {
      const size_t f = n / S, v = (n % S) / p->Ws, u = n % p->Ws;
      for (size_t i = 0; i < nq; i++) {
        const double pos = i < nt ? (double)f : i < nt + nh ? (double)v : (double)u;
        const double a = pos * omega[i], c = cos(a), s = sin(a);
        if (p->rope_cos) p->rope_cos[n * Dh + 2 * i] = p->rope_cos[n * Dh + 2 * i + 1] = c;
        if (p->rope_sin) p->rope_sin[n * Dh + 2 * i] = -s, p->rope_sin[n * Dh + 2 * i + 1] = s;
      }
    }
  }
  return CAMDELTA_OK;
}
