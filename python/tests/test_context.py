"""Contexts: the device's description, build statistics, warming, the default context and its replacement."""
import logging

import camdelta
from camdelta import ref
from conftest import rel_err


def test_device_description(ctx):
    d = ctx.device
    assert d.device_name and d.platform_name and d.compute_units >= 1 and d.global_mem_bytes > 0
    assert repr(ctx).startswith("<camdelta.Context %s" % d.device_name)
    assert isinstance(ctx.zero_copy, bool) and isinstance(ctx.direct, bool)
    assert not ctx.direct or ctx.zero_copy


def test_warm_shape_builds_what_the_calls_use(inputs):
    """After warm((B, H, D, S)), scan forward and backward of that shape build no program."""
    with camdelta.Context() as c:
        args = inputs.scan(1, 2, 8, 3, 4)
        c.warm((1, 2, 8, 4))
        before = c.build_stats()
        assert before.programs >= 1
        r = camdelta.scan_forward(*args, ctx=c)
        camdelta.scan_backward(*args, r.out, ctx=c)
        assert c.build_stats().programs == before.programs
        assert rel_err(r.out, ref.scan_forward(*args).out) <= 1e-5


def test_default_context_can_be_replaced(inputs, caplog):
    args = inputs.scan(1, 2, 8, 3, 4)
    old = camdelta.default_context()
    with caplog.at_level(logging.INFO, logger="camdelta"):
        mine = camdelta.Context(zero_copy=False)
    assert any("copied" in r.getMessage() for r in caplog.records)
    try:
        camdelta.set_default_context(mine)
        assert camdelta.default_context() is mine
        camdelta.scan_forward(*args)
        assert mine.transfers.to_device > 0
    finally:
        camdelta.set_default_context(old)
        mine.close()
    assert camdelta.default_context() is old
