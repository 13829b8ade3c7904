"""camdelta: the camera branch of a video diffusion model's linear attention (the UCPE single-path delta
rule) on any OpenCL device, from Python.

- camdelta.ops (re-exported here): every operation of the C library on NumPy arrays;
- camdelta.ref: the library's float64 references of the same operations;
- camdelta.torch: drop-ins for the seed module's PyTorch functions (cam_prep_func, cam_scan_func and their
  autograd forms) and the whole branch with autograd;
- Stream: the branch block by block with a constant-memory state (docs/streaming.md);
- Context: the device (CAMDELTA_DEVICE selects it); on CPU devices arrays are used in place, without copies.

The package loads libcamdelta through ctypes: CAMDELTA_LIBRARY names it, else the path CMake's install
wrote, else the system's library search. See docs/python.md.
"""
from ._lib import LibraryNotFoundError, library_path, version_number
from .context import (BranchSaved, BuildStats, Context, DeviceInfo, PrepSaved, ScanSaved, Transfers,
                      default_context, set_default_context)
from .errors import CamdeltaError
from .stream import Stream
from . import errors, ref
from .ops import (BranchGrads, CameraOutputs, ConvGrads, PackedScanOutputs, PrepGrads, PrepOutputs, ScanGrads,
                  ScanOutputs, Summary, branch_backward, branch_forward, camera_forward, chunk_bounds, conv_bounds,
                  default_k_scale, from_bf16, invert_se3, output_transform_backward, output_transform_forward,
                  prep_backward, prep_forward, rope_tables, scan_backward, scan_backward_packed, scan_forward,
                  scan_forward_packed, scan_grad_summary, scan_plan, scan_summary, short_conv_backward,
                  short_conv_forward, summary_apply, summary_combine, to_bf16)

__version__ = "%d.%d.%d" % (version_number // 10000, version_number // 100 % 100, version_number % 100)

__all__ = ["BranchGrads", "BranchSaved", "BuildStats", "CamdeltaError", "CameraOutputs", "Context", "ConvGrads",
           "DeviceInfo", "LibraryNotFoundError", "PackedScanOutputs", "PrepGrads", "PrepOutputs", "PrepSaved",
           "ScanGrads", "ScanOutputs", "ScanSaved", "Stream", "Summary", "Transfers", "branch_backward", "branch_forward",
           "camera_forward", "chunk_bounds", "conv_bounds", "default_context", "default_k_scale", "errors",
           "from_bf16", "invert_se3", "library_path", "output_transform_backward", "output_transform_forward",
           "prep_backward", "prep_forward", "ref", "rope_tables", "scan_backward", "scan_backward_packed",
           "scan_forward", "scan_forward_packed", "scan_grad_summary", "scan_plan", "scan_summary",
           "set_default_context", "short_conv_backward", "short_conv_forward", "summary_apply", "summary_combine",
           "to_bf16"]
