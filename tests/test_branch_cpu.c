/* The CPU forms of the short conv and the output transform (cl/branch_cpu.cl; options conv FORM and output FORM)
 * and their work-group forms, each forced through camdelta_tune_set, against the f64 references on awkward shapes:
 * channel counts that are no multiple of 8 (a partial group of 8 lanes), one spatial position, fewer positions than
 * the backward's SB and a partial last block of them, token counts that leave a partial block of 8 and of 16, head
 * dims whose camera half ends inside a group of 8 channels (D = 8, 24), buffers at odd offsets, and calls so
 * small that the conv splits its channels over several work-items. The two forms do the same operations in the same
 * order: their results agree bit for bit, also in f16 and bf16 storage (the camera branch's 16-bit activations:
 * the launches the branch makes, the conv continuing a stream's look-back). On a driver with a loop budget (Rusticl)
 * both settings run the work-group forms. The head dims are those the branch tests build programs for, but for one
 * (D = 24): the work-group form's programs are built per head dim. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "camdelta_ref.h"
#include "ops/camera_op.h"
#include "runtime/internal.h"
#include "testutil.h"

/* A device copy of n floats at element offset off, after NaNs. */
static cl_mem at_offset(const float *x, size_t n, size_t off) { return tu_upload_at(x, n, 4, off, 0xFF); }

/* Downloads n floats from element offset off. */
static float *fetch(cl_mem m, size_t off, size_t n) {
  float *h = malloc(n * 4);
  tu_download(m, off * 4, n * 4, h);
  return h;
}

/* Both forms' outputs of one shape: [form][output]. */
typedef struct outputs {
  float *o[2][3];
  size_t n[3];
} outputs;

/* Checks form f's outputs against the references (tolerances tol[i]) and, for f = 1, form 0's bits. */
static void compare(const outputs *r, int f, const double *const *ref, const double *tol, const char *what,
                    const char *const *names) {
  for (int i = 0; i < 3 && r->n[i]; i++) {
    const double e = tu_rel_err(r->o[f][i], ref[i], r->n[i]);
    if (!(e <= tol[i])) fail_msg("%s, FORM=%d: %s rel err %.3g", what, f, names[i], e);
    if (f && memcmp(r->o[0][i], r->o[1][i], r->n[i] * 4) != 0)
      fail_msg("%s: %s differs between FORM=0 and FORM=1", what, names[i]);
  }
}

/* Both forms checked (compare), then their outputs freed and the call's nmem buffers released. */
static void check_forms(outputs *r, const double *const *ref, const double *tol, const char *what,
                        const char *const *names, cl_mem *mem, int nmem) {
  for (int f = 0; f < 2; f++) compare(r, f, ref, tol, what, names);
  for (int f = 0; f < 2; f++)
    for (int i = 0; i < 3; i++) free(r->o[f][i]);
  for (int i = 0; i < nmem; i++) clReleaseMemObject(mem[i]);
}

typedef struct conv_case {
  size_t B, T, S, C, cs, off;
} conv_case;

static void conv_case_run(const conv_case *s) {
  camdelta_context *ctx = tu_context();
  const size_t n = s->B * s->T * s->S * s->C, nw = 4 * s->C, off = s->off;
  const camdelta_chunking ch = {s->cs, CAMDELTA_CHUNK_FIRST_CHUNK_PLUS_ONE, NULL, 0};
  float *x = malloc(n * 4), *w = malloc(nw * 4), *dy = malloc(n * 4);
  tu_fill_normal(x, n, 1.0), tu_fill_normal(w, nw, 0.5), tu_fill_normal(dy, n, 1.0);
  cl_mem dx_in = at_offset(x, n, off), dw_in = at_offset(w, nw, 0), ddy = at_offset(dy, n, off);
  cl_mem y = tu_buffer((n + off) * 4), gx = tu_buffer((n + off) * 4), gw = tu_buffer((nw + off) * 4);
  const camdelta_short_conv_args a = {.B = s->B, .T = s->T, .S = s->S, .C = s->C, .chunking = ch,
                                      .k_raw = {dx_in, off}, .conv_weight = {dw_in, 0}, .k_conv = {y, off},
                                      .grad_k_conv = {ddy, off}, .dk_raw = {gx, off}, .dconv_weight = {gw, off}};
  outputs r = {.n = {n, n, nw}};
  for (int f = 0; f < 2; f++) {
    TU_OK(camdelta_tune_set(ctx, "conv", f ? "FORM=1" : "FORM=0"));
    TU_OK(camdelta_short_conv_forward(ctx, &a));
    TU_OK(camdelta_short_conv_backward(ctx, &a));
    r.o[f][0] = fetch(y, off, n), r.o[f][1] = fetch(gx, off, n), r.o[f][2] = fetch(gw, off, nw);
  }
  TU_OK(camdelta_tune_set(ctx, "conv", NULL));
  size_t b[64], nb;
  TU_OK(camdelta_conv_bounds(s->T, &ch, b, 64, &nb));
  double *x64 = tu_to_f64(x, n), *w64 = tu_to_f64(w, nw), *dy64 = tu_to_f64(dy, n);
  double *ry = malloc(n * 8), *rdx = malloc(n * 8), *rdw = malloc(nw * 8);
  const camdelta_ref_conv p = {s->B, s->T, s->S, s->C, b, nb, x64, w64, ry, dy64, rdx, rdw};
  TU_OK(camdelta_ref_short_conv_forward(&p));
  TU_OK(camdelta_ref_short_conv_backward(&p));
  const double *ref[3] = {ry, rdx, rdw}, tol[3] = {1e-6, 1e-6, 1e-5};
  static const char *const names[3] = {"k_conv", "dk_raw", "dconv_weight"};
  char what[96];
  snprintf(what, sizeof what, "conv B=%zu T=%zu S=%zu C=%zu", s->B, s->T, s->S, s->C);
  cl_mem all[6] = {dx_in, dw_in, ddy, y, gx, gw};
  check_forms(&r, ref, tol, what, names, all, 6);
  free(x), free(w), free(dy), free(x64), free(w64), free(dy64), free(ry), free(rdx), free(rdw);
}

static void test_conv_forms(void **state) {
  (void)state;
  static const conv_case cases[] = {
      {.B = 2, .T = 7, .S = 3, .C = 13, .cs = 3, .off = 1}, {.B = 1, .T = 1, .S = 1, .C = 5, .cs = 0, .off = 0},
      {.B = 1, .T = 9, .S = 11, .C = 20, .cs = 2, .off = 3}, {.B = 2, .T = 4, .S = 2, .C = 1, .cs = 1, .off = 2},
      {.B = 1, .T = 5, .S = 17, .C = 64, .cs = 3, .off = 0}, {.B = 1, .T = 2, .S = 4, .C = 40, .cs = 0, .off = 5},
  };
  tu_seed(401);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) conv_case_run(&cases[i]);
}

typedef struct ot_case {
  size_t B, N, H, D, off;
  int two;
} ot_case;

static void ot_case_run(const ot_case *s) {
  camdelta_context *ctx = tu_context();
  const size_t n = s->B * s->N * s->H * s->D, Dh = s->D / 2, nr = s->N * Dh, np = s->B * s->N * 16, off = s->off;
  float *o1 = malloc(n * 4), *o2 = malloc(n * 4), *gy = malloc(n * 4), *P = malloc(np * 4);
  float *rc = malloc(nr * 4), *rs = malloc(nr * 4);
  tu_fill_normal(o1, n, 1.0), tu_fill_normal(o2, n, 1.0), tu_fill_normal(gy, n, 1.0), tu_fill_normal(P, np, 1.0);
  for (size_t i = 0; i < nr / 2; i++) { /* interleaved pairs: (cos, cos), (-sin, sin) */
    const double ang = tu_uniform(-40, 40);
    rc[2 * i] = rc[2 * i + 1] = (float)cos(ang);
    rs[2 * i] = (float)-sin(ang), rs[2 * i + 1] = (float)sin(ang);
  }
  cl_mem d1 = at_offset(o1, n, off), d2 = at_offset(o2, n, off), dgy = at_offset(gy, n, off);
  cl_mem dP = at_offset(P, np, off), dc = at_offset(rc, nr, off), ds = at_offset(rs, nr, off);
  cl_mem y = tu_buffer((n + off) * 4), go = tu_buffer((n + off) * 4);
  const camdelta_buffer none = {NULL, 0};
  const camdelta_output_transform_args a = {.B = s->B, .N = s->N, .H = s->H, .D = s->D, .out = {d1, off},
                                            .out2 = s->two ? (camdelta_buffer){d2, off} : none,
                                            .proj_o = {dP, off}, .rope_cos = {dc, off}, .rope_sin = {ds, off},
                                            .y = {y, off}, .grad_y = {dgy, off}, .grad_out = {go, off}};
  outputs r = {.n = {n, n, 0}};
  for (int f = 0; f < 2; f++) {
    TU_OK(camdelta_tune_set(ctx, "output", f ? "FORM=1" : "FORM=0"));
    TU_OK(camdelta_output_transform_forward(ctx, &a));
    TU_OK(camdelta_output_transform_backward(ctx, &a));
    r.o[f][0] = fetch(y, off, n), r.o[f][1] = fetch(go, off, n);
  }
  TU_OK(camdelta_tune_set(ctx, "output", NULL));
  double *x = tu_to_f64(o1, n), *P64 = tu_to_f64(P, np), *c64 = tu_to_f64(rc, nr), *s64 = tu_to_f64(rs, nr);
  double *g64 = tu_to_f64(gy, n), *ry = malloc(n * 8), *rg = malloc(n * 8);
  if (s->two)
    for (size_t i = 0; i < n; i++) x[i] += (double)o2[i];
  TU_OK(camdelta_ref_output_transform(s->B, s->N, s->H, s->D, x, P64, c64, s64, ry));
  TU_OK(camdelta_ref_output_transform_backward(s->B, s->N, s->H, s->D, g64, P64, c64, s64, rg));
  const double *ref[3] = {ry, rg, NULL}, tol[3] = {1e-6, 1e-6, 0};
  static const char *const names[3] = {"y", "grad_out", ""};
  char what[96];
  snprintf(what, sizeof what, "output transform B=%zu N=%zu H=%zu D=%zu", s->B, s->N, s->H, s->D);
  cl_mem all[8] = {d1, d2, dgy, dP, dc, ds, y, go};
  check_forms(&r, ref, tol, what, names, all, 8);
  free(o1), free(o2), free(gy), free(P), free(rc), free(rs), free(x), free(P64), free(c64), free(s64), free(g64);
  free(ry), free(rg);
}

static void test_output_forms(void **state) {
  (void)state;
  static const ot_case cases[] = {
      {.B = 2, .N = 7, .H = 3, .D = 8, .off = 1, .two = 1},   {.B = 1, .N = 17, .H = 2, .D = 24, .off = 3, .two = 0},
      {.B = 2, .N = 33, .H = 1, .D = 64, .off = 0, .two = 1}, {.B = 1, .N = 16, .H = 2, .D = 112, .off = 2, .two = 1},
      {.B = 1, .N = 1, .H = 1, .D = 64, .off = 0, .two = 0},
  };
  tu_seed(402);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) ot_case_run(&cases[i]);
}

/* n elements of dt storage from a device buffer, widened to f32; fails on a NaN (an element left unwritten). */
static float *fetch_as(camdelta_dtype dt, cl_mem m, size_t n, const char *what, int form) {
  const size_t es = camdelta_dtype_size(dt);
  void *raw = malloc(n * es);
  float *h = malloc(n * 4);
  tu_download(m, 0, n * es, raw);
  tu_unpack(dt, raw, h, n);
  free(raw);
  for (size_t i = 0; i < n; i++)
    if (isnan(h[i])) fail_msg("%s, FORM=%d: %s[%zu] of %zu not written", camdelta_dtype_name(dt), form, what, i, n);
  return h;
}

/* The branch's launches in 16-bit storage, each form: the conv forward continuing 2 frames of look-back (writing
 * the next look-back, which must be x's last three frames) and its backward, the output transform forward (with
 * out2) and backward; outputs compared bit for bit. */
static void half_forms(camdelta_dtype dt) {
  camdelta_context *ctx = tu_context();
  const size_t B = 2, T = 5, S = 7, C = 13, back = 2, n = B * T * S * C, nl = B * 3 * S * C;
  const size_t es = camdelta_dtype_size(dt);
  const size_t N = 21, H = 2, D = 8, no = B * N * H * D, nr = N * D / 2;
  const camdelta_chunking ch = {2, CAMDELTA_CHUNK_FIRST_CHUNK_PLUS_ONE, NULL, 0};
  /* the inputs one after the other in h: x, look-back, dy, out, out2, grad_y, proj_o, cos, sin */
  size_t at[10] = {0, n, nl, n, no, no, no, B * N * 16, nr, nr};
  for (int i = 1; i < 10; i++) at[i] += at[i - 1];
  float *h = malloc(at[9] * 4);
  tu_fill_normal(h, at[9], 1.0);
  void *xs = tu_pack(dt, h, n), *ls = tu_pack(dt, h + at[1], nl), *ds = tu_pack(dt, h + at[2], n);
  void *gs = tu_pack(dt, h + at[5], no);
  cl_mem x = tu_upload(xs, n * es), lb = tu_upload(ls, nl * es), dy = tu_upload(ds, n * es);
  cl_mem w = tu_upload(h, 4 * C * 4), gy = tu_upload(gs, no * es);
  cl_mem out = tu_upload(h + at[3], no * 4), out2 = tu_upload(h + at[4], no * 4), po = tu_upload(h + at[6], B * N * 64);
  cl_mem rc = tu_upload(h + at[7], nr * 4), rs = tu_upload(h + at[8], nr * 4);
  cl_mem seg_fwd, seg_bwd;
  TU_OK(cd_short_conv_segments(ctx, "test", back + T, &ch, &seg_fwd));
  TU_OK(cd_short_conv_segments(ctx, "test", T, &ch, &seg_bwd));
  static const char *const names[6] = {"k_conv", "dk_raw", "dconv_weight", "y", "grad_out", "look-back out"};
  float *got[2][6];
  for (int f = 0; f < 2; f++) {
    TU_OK(camdelta_tune_set(ctx, "conv", f ? "FORM=1" : "FORM=0"));
    TU_OK(camdelta_tune_set(ctx, "output", f ? "FORM=1" : "FORM=0"));
    cl_mem y = tu_buffer(n * es), dx = tu_buffer(n * es), dw = tu_buffer(4 * C * 4), yo = tu_buffer(no * es),
           go = tu_buffer(no * 4), lbo = tu_buffer(nl * es);
    const camdelta_output_transform_args oa = {.B = B, .N = N, .H = H, .D = D, .out = {out, 0}, .out2 = {out2, 0},
                                               .proj_o = {po, 0}, .rope_cos = {rc, 0}, .rope_sin = {rs, 0},
                                               .y = {yo, 0}, .grad_y = {gy, 0}, .grad_out = {go, 0}};
    cd_launch l;
    cd_launch_init(&l, NULL);
    camdelta_status st = cd_short_conv_enqueue_forward(ctx, dt, B, T, S, C, (camdelta_buffer){lb, 0}, back,
                                                       (camdelta_buffer){x, 0}, (camdelta_buffer){w, 0}, seg_fwd,
                                                       (camdelta_buffer){y, 0}, (camdelta_buffer){lbo, 0}, &l);
    if (!st)
      st = cd_short_conv_enqueue_backward(ctx, dt, B, T, S, C, (camdelta_buffer){x, 0}, (camdelta_buffer){w, 0},
                                          seg_bwd, (camdelta_buffer){dy, 0}, (camdelta_buffer){dx, 0},
                                          (camdelta_buffer){dw, 0}, &l);
    if (!st) st = cd_output_transform_enqueue(ctx, dt, 0, &oa, &l);
    if (!st) st = cd_output_transform_enqueue(ctx, dt, 1, &oa, &l);
    TU_OK(cd_launch_end(ctx, &l, st));
    got[f][0] = fetch_as(dt, y, n, names[0], f), got[f][1] = fetch_as(dt, dx, n, names[1], f);
    got[f][2] = fetch_as(CAMDELTA_F32, dw, 4 * C, names[2], f), got[f][3] = fetch_as(dt, yo, no, names[3], f);
    got[f][4] = fetch_as(CAMDELTA_F32, go, no, names[4], f), got[f][5] = fetch_as(dt, lbo, nl, names[5], f);
    cl_mem outs[6] = {y, dx, dw, yo, go, lbo};
    for (int i = 0; i < 6; i++) clReleaseMemObject(outs[i]);
  }
  TU_OK(camdelta_tune_set(ctx, "conv", NULL));
  TU_OK(camdelta_tune_set(ctx, "output", NULL));
  /* the next look-back is x's frames T-3 .. T-1, bit for bit */
  float *xw = malloc(n * 4);
  tu_unpack(dt, xs, xw, n);
  for (size_t b = 0; b < B; b++)
    for (size_t j = 0; j < 3; j++)
      for (size_t e = 0; e < S * C; e++)
        if (memcmp(&got[0][5][(b * 3 + j) * S * C + e], &xw[(b * T + T - 3 + j) * S * C + e], 4) != 0)
          fail_msg("%s: look-back out (b %zu, slot %zu, element %zu) is not x's frame %zu", camdelta_dtype_name(dt), b,
                   j, e, T - 3 + j);
  free(xw);
  const size_t counts[6] = {n, n, 4 * C, no, no, nl};
  for (int i = 0; i < 6; i++) {
    if (memcmp(got[0][i], got[1][i], counts[i] * 4) != 0)
      fail_msg("%s: %s differs between FORM=0 and FORM=1", camdelta_dtype_name(dt), names[i]);
    free(got[0][i]), free(got[1][i]);
  }
  cl_mem all[12] = {x, lb, dy, w, out, out2, gy, po, rc, rs, seg_fwd, seg_bwd};
  for (int i = 0; i < 12; i++) clReleaseMemObject(all[i]);
  free(h), free(xs), free(ls), free(ds), free(gs);
}

static void test_half_forms(void **state) {
  (void)state;
  tu_seed(403);
  half_forms(CAMDELTA_F16);
  half_forms(CAMDELTA_BF16);
}

TU_MAIN(NULL, tu_teardown_context, cmocka_unit_test(test_conv_forms), cmocka_unit_test(test_output_forms),
        cmocka_unit_test(test_half_forms))
