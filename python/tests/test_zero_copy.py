"""Host arrays reach a CPU device without a copy: the kernels read the inputs and write the outputs in the
arrays' own memory. On a context that copies (as on discrete GPUs) the results are the same and the copies
are counted."""
import ctypes as C

import numpy as np
import pytest

import camdelta
from camdelta import _lib as L
from camdelta import _structs as S
from camdelta import ref
from camdelta.context import _Stage
from conftest import rel_err

CL_MEM_HOST_PTR = 0x1103
CL_MEM_FLAGS = 0x1101


def _mem_info(mem, what):
    v = C.c_void_p() if what == CL_MEM_HOST_PTR else C.c_uint64()
    assert L.cl.clGetMemObjectInfo(C.c_void_p(mem), what, C.sizeof(v), C.byref(v), None) == 0
    return v.value or 0


L.cl.clGetMemObjectInfo.argtypes = [C.c_void_p, C.c_uint32, C.c_size_t, C.c_void_p, C.c_void_p]


def test_cpu_device_is_zero_copy(ctx):
    if not (ctx.device.type & L.CL_DEVICE_TYPE_CPU or ctx.device.host_unified_memory):
        pytest.skip("the device does not share host memory")
    assert ctx.zero_copy


def test_kernels_read_and_write_the_arrays_in_place(ctx, inputs):
    """The call's buffers are the arrays' memory (CL_MEM_USE_HOST_PTR at their addresses), the output holds the
    result before any map or read, and an input changed after its buffer was made is what the kernel reads."""
    if not ctx.zero_copy:
        pytest.skip("a copying context")
    B, H, D, F, S_ = 1, 2, 8, 3, 4
    q, k, v, beta, decay = inputs.scan(B, H, D, F, S_)
    out = np.full(q.shape, np.nan, np.float32)
    with _Stage(ctx) as st:
        bufs = [st.i(a) for a in (q, k, v, beta, decay)]
        ob = st.o(out)
        for a, b in zip((q, k, v, beta, decay, out), bufs + [ob]):
            assert _mem_info(b.mem, CL_MEM_HOST_PTR) == a.ctypes.data
            assert _mem_info(b.mem, CL_MEM_FLAGS) & L.CL_MEM_USE_HOST_PTR
        v[...] = -v  # after the buffer exists: a copy made at creation would not see this
        args = S.scan_args(B=B, H=H, D=D, F=F, S=S_, algorithm=S.ALGORITHMS["chunkwise"], q=bufs[0], k=bufs[1],
                           v=bufs[2], beta=bufs[3], decay=bufs[4], out=ob)
        assert L.lib.camdelta_scan_forward(st.h, C.byref(args), None) == 0
        assert L.lib.camdelta_finish(st.h) == 0
        # no map, no read: the kernel wrote into `out` itself
        assert rel_err(out, ref.scan_forward(q, k, v, beta, decay).out) <= 1e-5
    assert ctx.transfers.to_device == 0 and ctx.transfers.from_device == 0


def test_operations_hand_over_the_arrays_own_memory(ctx, inputs, monkeypatch):
    """Every array of a call, NumPy or torch, reaches the library as a cl_mem over the array's own address."""
    if not ctx.zero_copy:
        pytest.skip("a copying context")
    seen = {}
    orig = L.lib.camdelta_scan_forward

    def spy(h, args, saved):
        a = args._obj
        for name in ("q", "k", "v", "beta", "decay", "out"):
            mem = getattr(a, name).mem
            assert _mem_info(mem, CL_MEM_FLAGS) & L.CL_MEM_USE_HOST_PTR
            seen[name] = _mem_info(mem, CL_MEM_HOST_PTR)
        return orig(h, args, saved)

    monkeypatch.setattr(L.lib, "camdelta_scan_forward", spy)
    names = ("q", "k", "v", "beta", "decay")
    args = inputs.scan(1, 2, 8, 3, 4)
    for _ in range(2):  # the second call takes the cl_mems the context kept from the first
        seen.clear()
        r = camdelta.scan_forward(*args)
        assert seen == dict(zip(names + ("out",), [a.ctypes.data for a in args] + [r.out.ctypes.data]))
    torch = pytest.importorskip("torch")
    import camdelta.torch as ct
    ts = [torch.from_numpy(a.copy()) for a in args]
    seen.clear()
    out = ct.cam_scan_func(*ts)
    assert seen == dict(zip(names + ("out",), [t.data_ptr() for t in ts] + [out.data_ptr()]))
    assert rel_err(out.numpy(), ref.scan_forward(*args).out) <= 1e-5


def test_copying_context_gives_the_same_results_and_counts_its_copies(inputs):
    args = inputs.scan(1, 2, 8, 3, 4)
    with camdelta.Context(zero_copy=False) as c:
        assert not c.zero_copy and "copies" in repr(c)
        r = camdelta.scan_forward(*args, final_state=True, ctx=c)
        assert rel_err(r.out, ref.scan_forward(*args).out) <= 1e-5
        assert c.transfers.to_device == sum(a.nbytes for a in args)
        assert c.transfers.from_device == r.out.nbytes + r.final_state.nbytes
        g = camdelta.scan_backward(*args, np.ones_like(args[0]), ctx=c)
        assert rel_err(g.dq, ref.scan_backward(*args, np.ones_like(args[0])).dq) <= 1e-4


def test_kept_buffers_follow_the_memory_they_cover(ctx, inputs):
    """A direct context keeps the cl_mems of recent address ranges: a call on the same memory with new contents
    reads the new contents, an output fed back as an input is read correctly, and no more than VIEW_CACHE are
    kept however many arrays pass."""
    if not ctx.direct:
        pytest.skip("the context does not keep buffers")
    from camdelta import context
    q, k, v, beta, decay = inputs.scan(1, 2, 8, 3, 4)
    first = camdelta.scan_forward(q, k, v, beta, decay).out
    v[...] = inputs.normal(*v.shape)  # same memory, new contents
    q[...] = first  # and the first output's values as the next query
    again = camdelta.scan_forward(q, k, v, beta, decay).out
    assert rel_err(again, ref.scan_forward(q, k, v, beta, decay).out) <= 1e-5
    chained = camdelta.scan_forward(again, k, v, beta, decay).out  # an output (a read-write view) as input
    assert rel_err(chained, ref.scan_forward(again, k, v, beta, decay).out) <= 1e-5
    many = [inputs.normal(*q.shape) for _ in range(context.VIEW_CACHE + 8)]
    for x in many:
        assert rel_err(camdelta.scan_forward(x, k, v, beta, decay).out,
                       ref.scan_forward(x, k, v, beta, decay).out) <= 1e-5
    assert len(ctx._views) <= context.VIEW_CACHE and not ctx._evicted and ctx._busy == 0


def test_threads_share_a_context(ctx, inputs):
    """Calls from several threads on one context (the library serialises them on its queue) each get their own
    results while the context's kept buffers turn over."""
    import threading
    problems = [inputs.scan(1, 2, 8, 3, 4) for _ in range(4)]
    want = [ref.scan_forward(*p).out for p in problems]
    errors = []

    def work(i):
        try:
            for _ in range(20):
                extra = [inputs.normal(1, 2, 8, 12) for _ in range(3)]  # churn: new address ranges
                got = camdelta.scan_forward(*problems[i]).out
                assert rel_err(got, want[i]) <= 1e-5
                camdelta.scan_forward(*extra, *problems[i][3:])
        except Exception as e:  # reported below, in the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert not ctx._evicted and ctx._busy == 0
