import uuid

from aiokafka.partitioner import DefaultPartitioner

from infra.partitioner import RememberingPartitioner


def test_keys_land_where_kafkas_default_partitioner_puts_them() -> None:
    remembering, default = RememberingPartitioner(keys_remembered=8), DefaultPartitioner()
    keys = [str(uuid.uuid4()).encode() for _ in range(200)] + [b"", b"a", b"21", b"\xff" * 7]
    for partitions in (1, 3, 4, 12):
        every = list(range(partitions))
        for key in keys + keys[:5]:  # some asked again, after the cache has forgotten them
            assert remembering(key, every, every) == default(key, every, every)


def test_a_key_is_hashed_once_while_remembered(monkeypatch) -> None:
    import infra.partitioner as module

    hashed: list[bytes] = []

    def counting(key: bytes) -> int:
        hashed.append(key)
        return 7

    monkeypatch.setattr(module, "murmur2", counting)
    partitioner = RememberingPartitioner()
    assert [partitioner(b"rollout-1", [0, 1, 2], [0, 1, 2]) for _ in range(3)] == [1, 1, 1]
    assert hashed == [b"rollout-1"]


def test_records_without_a_key_go_to_an_available_partition() -> None:
    partitioner = RememberingPartitioner()
    assert {partitioner(None, [0, 1, 2, 3], [2]) for _ in range(20)} == {2}
