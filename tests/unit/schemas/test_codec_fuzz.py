"""Random and mutated bytes on any topic decode to a record or raise SchemaError — nothing
else — so every consumer's one decode-or-dead-letter path (``decode_message``) holds."""

from __future__ import annotations

import contextlib
import io

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infra.kafka_clients import Delivered, decode_message
from schemas import codec
from schemas.errors import SchemaError
from schemas.records import DeadLetter, ModelRequest
from schemas.topics import ALL_TOPICS
from tests.builders import all_records, model_request

VALID = [codec.encode(r) for r in all_records()]


@st.composite
def mutated(draw):
    data = bytearray(draw(st.sampled_from(VALID)))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "cut", "grow", "splice"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "flip" and data:
            data[at] ^= draw(st.integers(1, 255))
        elif kind == "cut":
            del data[at:]
        elif kind == "grow":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        else:
            data[at : at + 4] = draw(st.binary(min_size=4, max_size=4))
    return bytes(data)


@given(st.one_of(mutated(), st.binary(max_size=64)), st.sampled_from(ALL_TOPICS))
@settings(max_examples=1500, deadline=None)
def test_any_bytes_on_any_topic_decode_or_dead_letter(data, topic):
    with contextlib.suppress(SchemaError):
        codec.decode_any(data)
    result = decode_message(topic, partition=0, offset=7, key=b"k", value=data, consumer="fuzz")
    assert isinstance(result, Delivered | DeadLetter)
    if isinstance(result, DeadLetter):
        assert result.reason and result.value == data
        codec.decode(codec.encode(result), DeadLetter)  # the letter itself is storable


def test_a_tombstone_is_dead_lettered_not_raised():
    for topic in ALL_TOPICS:
        result = decode_message(topic, partition=0, offset=0, key=b"k", value=None, consumer="t")
        assert isinstance(result, DeadLetter) and "tombstone" in result.reason


def test_a_packed_array_of_a_broken_length_is_a_schema_error():
    """Found by the fuzz: numpy refused the bytes outside the guarded decode."""
    record = model_request()
    schemas = codec.current_schemas()
    datum = codec.to_datum(record)
    datum["prompt_token_ids"] = b"\x01\x02\x03"
    out = io.BytesIO()
    out.write(codec.MAGIC)
    out.write(schemas.fingerprints[record.schema_name])
    fastavro.schemaless_writer(out, schemas.parsed[record.schema_name], datum)
    with pytest.raises(SchemaError, match="corrupt"):
        codec.decode(out.getvalue(), ModelRequest)
