"""Loads the seed module (third_party/sana/fused_cam_ucpe_reference.py, unchanged) for its PyTorch references.

The module imports Triton and two modules of the Sana repository at import time; its PyTorch references use
none of them. Stubs stand in for those imports while the module loads (a decorator for @triton.jit, names
for the rest) and are removed from sys.modules afterwards, so nothing else sees them.
"""
import importlib.util
import os
import sys
import types

SEED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "third_party", "sana", "fused_cam_ucpe_reference.py")
_STUBS = ("triton", "triton.language", "diffusion", "diffusion.model", "diffusion.model.nets",
          "diffusion.model.nets.sana_camctrl_blocks", "diffusion.model.ops", "diffusion.model.ops.fused_gdn_chunkwise")


class _Stub(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)

        def unavailable(*args, **kwargs):
            raise RuntimeError("%s.%s is a stub: the seed's GPU path is not available here" % (self.__name__, name))

        return unavailable


def load(path=SEED):
    """The seed module, loaded from `path` with its GPU-only imports stubbed."""
    stubs = {n: _Stub(n) for n in _STUBS}
    stubs["triton"].jit = lambda fn=None, **kw: fn if fn is not None else (lambda f: f)
    stubs["triton"].language = stubs["triton.language"]
    before = {n: sys.modules.get(n) for n in _STUBS}
    sys.modules.update(stubs)
    try:
        spec = importlib.util.spec_from_file_location("fused_cam_ucpe_reference", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        for n, m in before.items():
            if m is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m
    return mod
