/* The names of the scan's public enums (camdelta.h). */
#include "scan/engine.h"

const char *camdelta_precision_name(camdelta_precision precision) {
  static const char *const NAMES[] = {[CAMDELTA_PRECISION_EXACT] = "exact", [CAMDELTA_PRECISION_TF32] = "tf32"};
  return CD_ENUM_NAME(NAMES, precision);
}

const char *camdelta_scan_algorithm_name(camdelta_scan_algorithm algorithm) {
  static const char *const NAMES[] = {[CAMDELTA_SCAN_AUTO] = "auto", [CAMDELTA_SCAN_SEQUENTIAL] = "sequential",
                                      [CAMDELTA_SCAN_CHUNKWISE] = "chunkwise"};
  return CD_ENUM_NAME(NAMES, algorithm);
}

camdelta_status cd_check_algorithm(const char *op, camdelta_scan_algorithm alg) {
  if (alg == CAMDELTA_SCAN_AUTO || alg == CAMDELTA_SCAN_SEQUENTIAL || alg == CAMDELTA_SCAN_CHUNKWISE)
    return CAMDELTA_OK;
  return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT,
                 "%s: algorithm %d unknown (expected CAMDELTA_SCAN_AUTO, SEQUENTIAL or CHUNKWISE)", op, (int)alg);
}

camdelta_status cd_check_precision(const char *op, camdelta_precision prec) {
  if (prec == CAMDELTA_PRECISION_EXACT || prec == CAMDELTA_PRECISION_TF32) return CAMDELTA_OK;
  return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT,
                 "%s: precision %d unknown (expected CAMDELTA_PRECISION_EXACT or CAMDELTA_PRECISION_TF32)", op,
                 (int)prec);
}
