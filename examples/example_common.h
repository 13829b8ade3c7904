/* What the examples camera_branch.c and stream_rollout.c share: a status check that ends the program, a seeded
 * pseudo-random source and a camera on an orbit. Copy it with either program. */
#ifndef CAMDELTA_EXAMPLE_COMMON_H
#define CAMDELTA_EXAMPLE_COMMON_H
#include <camdelta.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                    \
  do {                                                                                 \
    camdelta_status s_ = (call);                                                       \
    if (s_ != CAMDELTA_OK) {                                                           \
      fprintf(stderr, "%s: %s\n", camdelta_status_name(s_), camdelta_last_message()); \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)

static inline float frand(unsigned *s) { /* uniform in [-1, 1) */
  *s = *s * 1664525u + 1013904223u;
  return (float)((*s >> 8) / 16777216.0 * 2.0 - 1.0);
}

/* The camera_conditions (20 floats) of a camera at angle `a` (radians) on an orbit of radius 3 at height 0.5,
 * looking at the origin: camera-to-world (row-major; camera axes as columns, the centre as the last column), then
 * fx fy cx cy on an hs x ws token grid (patch 1). */
static inline void orbit_camera(double a, int hs, int ws, float *cc) {
  const double c[3] = {3 * sin(a), 0.5, -3 * cos(a)};
  const double n = sqrt(c[0] * c[0] + c[1] * c[1] + c[2] * c[2]);
  const double z[3] = {-c[0] / n, -c[1] / n, -c[2] / n}; /* looking at the origin */
  const double xn = sqrt(z[2] * z[2] + z[0] * z[0]);
  const double x[3] = {z[2] / xn, 0, -z[0] / xn}; /* (0, 1, 0) x z */
  const double y[3] = {z[1] * x[2] - z[2] * x[1], z[2] * x[0] - z[0] * x[2], z[0] * x[1] - z[1] * x[0]};
  for (int i = 0; i < 3; i++)
    cc[4 * i] = (float)x[i], cc[4 * i + 1] = (float)y[i], cc[4 * i + 2] = (float)z[i], cc[4 * i + 3] = (float)c[i];
  cc[12] = cc[13] = cc[14] = 0, cc[15] = 1;
  cc[16] = cc[17] = 0.9f * (float)ws, cc[18] = (float)ws / 2.0f, cc[19] = (float)hs / 2.0f;
}
#endif
