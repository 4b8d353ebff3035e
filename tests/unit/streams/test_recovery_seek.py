import asyncio
from collections import Counter
from types import SimpleNamespace

from faust.tables.recovery import Recovery
from faust.types import TP

from streams.recovery_seek import read_unknown_starts_from_the_beginning


def test_an_unknown_or_negative_start_is_read_from_the_beginning():
    read_unknown_starts_from_the_beginning()
    sought = {}

    async def seek_wait(offsets):
        sought.update(offsets)

    consumer = SimpleNamespace(seek_wait=seek_wait)
    tps = [TP("c", 0), TP("c", 1), TP("c", 2), TP("c", 3)]
    offsets = Counter({tps[0]: -2, tps[1]: None, tps[2]: -1, tps[3]: 41})
    asyncio.run(Recovery._seek_offsets(SimpleNamespace(), consumer, set(tps), offsets, "active"))
    assert sought == {tps[0]: 0, tps[1]: 0, tps[2]: 0, tps[3]: 41}
