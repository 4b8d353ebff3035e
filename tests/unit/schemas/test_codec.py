from __future__ import annotations

import numpy as np
import pytest

from schemas import codec
from schemas.errors import SchemaError
from schemas.records import RECORD_TYPES, Envelope, EventKind, ModelRequest
from tests.builders import all_records, envelope, model_request, model_response


@pytest.mark.parametrize("record", all_records(), ids=lambda r: type(r).__name__)
def test_every_record_round_trips(record):
    data = codec.encode(record)
    assert data[:2] == codec.MAGIC
    assert codec.decode(data, type(record)) == record


def test_every_record_type_has_a_sample():
    assert {type(r) for r in all_records()} == set(RECORD_TYPES)


def test_envelope_kind_follows_payload():
    assert envelope(model_response()).kind is EventKind.MODEL_RESPONSE


def test_tokens_travel_packed_little_endian():
    request = model_request(prompt_tokens=1000)
    data = codec.encode(request)
    assert request.prompt_token_ids.astype("<i4").tobytes() in data
    assert len(data) < 1000 * 4 + 200


def test_decoded_arrays_keep_dtype_and_values():
    response = model_response(completion_tokens=50)
    decoded = codec.decode(codec.encode(response), type(response))
    assert decoded.completion_token_ids.dtype == np.int32
    assert decoded.logprobs.dtype == np.float32
    np.testing.assert_array_equal(decoded.logprobs, response.logprobs)


def test_bad_magic_is_a_schema_error():
    with pytest.raises(SchemaError, match="bad magic"):
        codec.decode(b"{'json': 1}", Envelope)


def test_unknown_fingerprint_is_a_schema_error():
    data = bytearray(codec.encode(model_request()))
    data[2:10] = b"\xff" * 8
    with pytest.raises(SchemaError, match="unknown writer schema"):
        codec.decode(bytes(data), ModelRequest)


def test_truncated_body_is_a_schema_error():
    data = codec.encode(envelope(model_request()))
    with pytest.raises(SchemaError, match="corrupt"):
        codec.decode(data[:-20], Envelope)


def test_wrong_record_type_is_a_schema_error():
    with pytest.raises(SchemaError, match=r"expected forge\.Envelope"):
        codec.decode(codec.encode(model_request()), Envelope)
