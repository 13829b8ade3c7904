/* The random cameras of the test tools' input folders (tests/gen_inputs.c, tests/mpi/npy_tool.c). */
#ifndef CD_TOOL_CAMERAS_H
#define CD_TOOL_CAMERAS_H
#include <stddef.h>

/* camera_conditions (n cameras of 20 values) for a grid of Hs x Ws tokens: c2w near the identity (its 3 x 4 part
 * perturbed by up to 0.3), focal lengths near the image extent, centres near its middle; uni(lo, hi): the tool's
 * uniform generator, drawn in that order. */
static inline void tool_cameras(float *x, size_t n, size_t Hs, size_t Ws, float (*uni)(double lo, double hi)) {
  for (size_t i = 0; i < n; i++) {
    float *c = x + i * 20;
    for (int k = 0; k < 16; k++) c[k] = (k % 5 == 0 ? 1.0f : 0.0f) + (k < 12 ? uni(-0.3, 0.3) : 0.0f);
    c[16] = (float)Ws * uni(0.8, 1.2), c[17] = (float)Hs * uni(0.8, 1.2);
    c[18] = (float)Ws * uni(0.4, 0.6), c[19] = (float)Hs * uni(0.4, 0.6);
  }
}
#endif
