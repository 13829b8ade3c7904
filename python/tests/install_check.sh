#!/usr/bin/env bash
# Installs the build into a temporary prefix and imports the installed package there, from an unrelated
# folder and without CAMDELTA_LIBRARY: it must load the library installed with it and run an operation.
# Usage: install_check.sh BUILD_DIR PYTHON WORK_DIR PYTHON_INSTALL_DIR
set -euo pipefail
build=$1 py=$2 work=$3 pydir=$4
rm -rf "$work" && mkdir -p "$work/elsewhere"
prefix="$work/prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
case "$pydir" in /*) site="$pydir" ;; *) site="$prefix/$pydir" ;; esac
test -f "$site/camdelta/_install.py"
cd "$work/elsewhere"
env -u CAMDELTA_LIBRARY PYTHONPATH="$site" PYTHONDONTWRITEBYTECODE=1 "$py" - "$prefix" <<'PY'
import os, sys
import numpy as np
import camdelta
prefix = os.path.realpath(sys.argv[1])
lib = os.path.realpath(camdelta.library_path)
assert lib.startswith(prefix + os.sep), (lib, prefix)
assert os.path.realpath(camdelta.__file__).startswith(prefix + os.sep), camdelta.__file__
rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((1, 2, 8, 12)).astype(np.float32) for _ in range(3))
beta = rng.uniform(0.1, 0.5, (1, 2, 3, 4)).astype(np.float32)
decay = rng.uniform(0.5, 1.0, (1, 2, 3)).astype(np.float32)
out = camdelta.scan_forward(q, k, v, beta, decay).out
ref = camdelta.ref.scan_forward(q, k, v, beta, decay).out
err = np.abs(out - ref).max() / np.abs(ref).max()
assert err < 1e-5, err
print("installed camdelta %s: %s, library %s; scan error %.1e" % (camdelta.__version__, camdelta.__file__, lib, err))
PY
