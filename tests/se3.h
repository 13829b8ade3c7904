/* A rigid transform [R | t; 0 0 0 1] (row-major 4x4 f32) from a quaternion q (any length but 0: normalised here)
 * and a translation t: the random cameras of the tests (tests/test_reference.c, tests/mpi/test_mpi_branch.c). */
#ifndef CAMDELTA_TESTS_SE3_H
#define CAMDELTA_TESTS_SE3_H
#include <math.h>

static inline void tu_se3(const double q[4], const double t[3], float *P) {
  const double s = sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]);
  const double w = q[0] / s, x = q[1] / s, y = q[2] / s, z = q[3] / s;
  const double R[9] = {1 - 2 * (y * y + z * z), 2 * (x * y - w * z),     2 * (x * z + w * y),
                       2 * (x * y + w * z),     1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
                       2 * (x * z - w * y),     2 * (y * z + w * x),     1 - 2 * (x * x + y * y)};
  for (int r = 0; r < 3; r++) {
    for (int k = 0; k < 3; k++) P[r * 4 + k] = (float)R[r * 3 + k];
    P[r * 4 + 3] = (float)t[r];
  }
  P[12] = P[13] = P[14] = 0, P[15] = 1;
}

#endif
