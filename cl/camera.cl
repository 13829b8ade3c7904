/* Cameras -> per-token matrices and camera-half RoPE tables (docs/math.md §8.1). f32, no build options.
 *
 * cd_camera_matrices: one work-item per (token n, batch b). camera_conditions (B, T, 20) = c2w row-major (16),
 * fx fy cx cy in image pixels; token n = (f*Hs + v)*Ws + u. Ray in the camera d = (x, y, 1)/sqrt(1+x²+y²) with
 * x = (u - cx/pw)/(fx/pw), y = (v - cy/ph)/(fy/ph); z = normalize(R d), xr = normalize(R[:,1] x z),
 * yr = normalize(z x xr), A = rows xr, yr, z, P = [[A, -A t], [0, 1]]; a NaN in R d gives P = I.
 * Writes proj_q = P^T, proj_kv = [[A^T, -A^T b], [0, 1]] (b = -A t), proj_o = P, each when its flag is set.
 *
 * cd_camera_rope: one work-item per (frequency i < D/4, token n). The angles' cosines and sines come from a small
 * host table computed in f64 (axis_cs: (cos, sin) pairs for f * omega_t[j], then v * omega_h[j], then
 * u * omega_w[j]), so large positions lose no accuracy; the kernel spreads them to the interleaved-pair tables
 * rope_cos[n, 2i] = rope_cos[n, 2i+1] = cos, rope_sin[n, 2i] = -sin, rope_sin[n, 2i+1] = sin. */

#define CAM_PQ 1u
#define CAM_PKV 2u
#define CAM_PO 4u

inline float3 cam_normalize(float3 a) {
  const float n = sqrt(a.x * a.x + a.y * a.y + a.z * a.z);
  return a / fmax(n, 1e-6f);
}

inline float3 cam_cross(float3 a, float3 b) {
  return (float3)(a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x);
}

kernel void cd_camera_matrices(global const float *cc, ulong cc_off, global float *pq, ulong pq_off,
                               global float *pkv, ulong pkv_off, global float *po, ulong po_off, ulong N, uint T,
                               uint S, uint Ws, float ph, float pw, uint flags) {
  const ulong n = get_global_id(0), b = get_global_id(1);
  if (n >= N) return;
  const uint f = (uint)(n / S), rem = (uint)(n % S), v = rem / Ws, u = rem % Ws;
  global const float *c = cc + cc_off + ((ulong)b * T + f) * 20;
  const float fx = c[16] / pw, fy = c[17] / ph, cx = c[18] / pw, cy = c[19] / ph;
  const float x = ((float)u - cx) / fx, y = ((float)v - cy) / fy;
  const float r = sqrt(1.0f + x * x + y * y);
  const float3 d = (float3)(x / r, y / r, 1.0f / r);
  const float3 R0 = (float3)(c[0], c[1], c[2]), R1 = (float3)(c[4], c[5], c[6]), R2 = (float3)(c[8], c[9], c[10]);
  const float3 dw = (float3)(dot(R0, d), dot(R1, d), dot(R2, d));
  float P[16];
  for (int i = 0; i < 16; i++) P[i] = (i % 5 == 0) ? 1.0f : 0.0f;
  if (!(isnan(dw.x) || isnan(dw.y) || isnan(dw.z))) {
    const float3 z = cam_normalize(dw);
    const float3 xr = cam_normalize(cam_cross((float3)(c[1], c[5], c[9]), z));
    const float3 yr = cam_normalize(cam_cross(z, xr));
    const float3 t = (float3)(c[3], c[7], c[11]);
    P[0] = xr.x, P[1] = xr.y, P[2] = xr.z, P[3] = -dot(xr, t);
    P[4] = yr.x, P[5] = yr.y, P[6] = yr.z, P[7] = -dot(yr, t);
    P[8] = z.x, P[9] = z.y, P[10] = z.z, P[11] = -dot(z, t);
  }
  const ulong o = ((ulong)b * N + n) * 16;
  if (flags & CAM_PO)
    for (int i = 0; i < 16; i++) po[po_off + o + i] = P[i];
  if (flags & CAM_PQ)
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 4; j++) pq[pq_off + o + 4 * i + j] = P[4 * j + i];
  if (flags & CAM_PKV) {
    global float *Q = pkv + pkv_off + o;
    for (int i = 0; i < 3; i++) {
      float acc = 0.0f;
      for (int j = 0; j < 3; j++) {
        Q[4 * i + j] = P[4 * j + i];
        acc = fma(P[4 * j + i], P[4 * j + 3], acc);
      }
      Q[4 * i + 3] = -acc;
    }
    Q[12] = 0.0f, Q[13] = 0.0f, Q[14] = 0.0f, Q[15] = 1.0f;
  }
}

kernel void cd_camera_rope(global const float2 *axis_cs, global float *rope_cos, ulong rc_off,
                           global float *rope_sin, ulong rs_off, ulong N, uint S, uint Ws, uint T, uint Hs, uint nt,
                           uint nh, uint flags) {
  const uint i = get_global_id(0);
  const ulong n = get_global_id(1);
  const uint nq = nt + 2 * nh;
  if (i >= nq || n >= N) return;
  const uint f = (uint)(n / S), rem = (uint)(n % S), v = rem / Ws, u = rem % Ws;
  uint idx;
  if (i < nt) idx = f * nt + i;
  else if (i < nt + nh) idx = T * nt + v * nh + (i - nt);
  else idx = T * nt + Hs * nh + u * nh + (i - nt - nh);
  const float2 cs = axis_cs[idx];
  const ulong row = n * (2 * nq) + 2 * i;
  if (flags & 1u) {
    rope_cos[rc_off + row] = cs.x;
    rope_cos[rc_off + row + 1] = cs.x;
  }
  if (flags & 2u) {
    rope_sin[rs_off + row] = -cs.y;
    rope_sin[rs_off + row + 1] = cs.y;
  }
}
