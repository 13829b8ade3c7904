/* The names of the scan's public enums (camdelta.h). */
#include "runtime/internal.h"

const char *camdelta_precision_name(camdelta_precision precision) {
  static const char *const NAMES[] = {[CAMDELTA_PRECISION_EXACT] = "exact", [CAMDELTA_PRECISION_TF32] = "tf32"};
  return CD_ENUM_NAME(NAMES, precision);
}

const char *camdelta_scan_algorithm_name(camdelta_scan_algorithm algorithm) {
  static const char *const NAMES[] = {[CAMDELTA_SCAN_AUTO] = "auto", [CAMDELTA_SCAN_SEQUENTIAL] = "sequential",
                                      [CAMDELTA_SCAN_CHUNKWISE] = "chunkwise"};
  return CD_ENUM_NAME(NAMES, algorithm);
}
