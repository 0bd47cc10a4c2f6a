"""io/late_reads.quiet: asyncio's records of a failed checkpoint read's leftovers are dropped,
every other record kept. The records are made by a real event loop, as orbax's makes them."""

import asyncio
import gc
import logging

import pytest

from transformer_jax.io import late_reads

# What TensorStore's error says when a checkpoint's file is cut short (CI's log, 2026-12-06).
CUT_SHORT = ('OUT_OF_RANGE: Error opening "zarr" driver: Error reading Byte range [0, 13159) '
             'of local file "/tmp/run/checkpoints/30/state/d/f01e": Requested byte range '
             '[0, 13159) is not valid for value of size 9160 [tensorstore_spec=...]')


def leave_unretrieved(kind, message):
    """A future or task that ends in ValueError(message) which nobody retrieves: asyncio
    logs it when the object is collected."""
    loop = asyncio.new_event_loop()
    try:
        if kind == "future":
            future = loop.create_future()
            future.set_exception(ValueError(message))
        else:
            async def fail():
                raise ValueError(message)

            future = loop.create_task(fail())
            loop.run_until_complete(asyncio.sleep(0))
            assert future.done()
        del future
        gc.collect()
    finally:
        loop.close()


@pytest.mark.parametrize("kind", ["future", "task"])
def test_a_checkpoint_reads_unretrieved_error_is_dropped_and_any_other_kept(kind, caplog):
    words = {"future": "Future exception was never retrieved",
             "task": "Task exception was never retrieved"}[kind]
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        leave_unretrieved(kind, "unrelated failure")  # before quiet(): logged
    assert [r.getMessage().splitlines()[0] for r in caplog.records] == [words]
    caplog.clear()
    logger = logging.getLogger("asyncio")
    filters = list(logger.filters)
    try:
        late_reads.quiet()
        with caplog.at_level(logging.ERROR, logger="asyncio"):
            leave_unretrieved(kind, CUT_SHORT)
            assert caplog.records == []
            leave_unretrieved(kind, "unrelated failure")
        assert [r.getMessage().splitlines()[0] for r in caplog.records] == [words]
    finally:
        logger.filters[:] = filters
