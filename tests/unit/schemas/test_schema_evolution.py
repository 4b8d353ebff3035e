"""Data written with every released schema version stays readable by the current code."""

from __future__ import annotations

import copy
import io
from typing import Any

import fastavro
import pytest

from schemas import codec
from schemas.errors import SchemaError
from schemas.records import BY_SCHEMA_NAME

RELEASED = codec.released_schemas()


def expanded(schema: dict[str, Any]) -> dict[str, Any]:
    """A parsed schema back as plain, fully expanded JSON."""
    return {k: v for k, v in copy.deepcopy(schema).items() if not k.startswith("__")}


def sample_datum(schema: Any, named: dict[str, Any]) -> Any:
    """A valid datum for any (expanded) Avro schema, exercising every field."""
    if isinstance(schema, str):
        if schema in named:
            return sample_datum(named[schema], named)
        return {
            "null": None, "boolean": True, "int": 3, "long": 5, "float": 0.5,
            "double": 1.5, "bytes": b"\x01\x00\x00\x00", "string": "s",
        }[schema]  # fmt: skip
    if isinstance(schema, list):
        branch = next((b for b in schema if b != "null"), "null")
        datum = sample_datum(branch, named)
        if isinstance(branch, str) and branch in named and named[branch]["type"] == "record":
            return (branch, datum)
        return datum
    kind = schema["type"]
    if kind == "record":
        named[schema["name"]] = schema
        return {f["name"]: sample_datum(f["type"], named) for f in schema["fields"]}
    if kind == "enum":
        return schema["symbols"][0]
    if kind == "array":
        return [sample_datum(schema["items"], named)]
    if kind == "map":
        return {"k": sample_datum(schema["values"], named)}
    return sample_datum(kind, named)


def write_with(schema: dict[str, Any], datum: Any) -> bytes:
    out = io.BytesIO()
    out.write(codec.MAGIC)
    out.write(codec.fingerprint(expanded(schema)))
    fastavro.schemaless_writer(out, schema, datum)
    return out.getvalue()


def test_released_versions_exist():
    assert RELEASED, "at least one frozen schema version must live in schemas/released/"


@pytest.mark.parametrize("released", RELEASED, ids=lambda s: s.version)
def test_current_reader_reads_every_released_version(released):
    current = codec.current_schemas()
    assert set(released.parsed) <= set(current.parsed), "a released schema was removed"
    for name, schema in released.parsed.items():
        data = write_with(schema, sample_datum(expanded(schema), {}))
        record = codec.decode(data, BY_SCHEMA_NAME[name])
        assert record.schema_name == name


def test_incompatible_change_is_detected(tmp_path):
    """The check above can fail: a new required field without default breaks old data."""
    released = RELEASED[-1]
    breaking = expanded(released.parsed["forge.QueueEntry"])
    old_writer = fastavro.parse_schema(copy.deepcopy(breaking))
    breaking["fields"].append({"name": "priority", "type": "int"})
    reader = fastavro.parse_schema(breaking)
    data = io.BytesIO()
    fastavro.schemaless_writer(data, old_writer, sample_datum(copy.deepcopy(breaking), {}))
    data.seek(0)
    with pytest.raises(fastavro.read.SchemaResolutionError):
        fastavro.schemaless_reader(data, old_writer, reader)


def test_unknown_schema_version_is_rejected():
    schema = expanded(codec.current_schemas().parsed["forge.QueueEntry"])
    schema["fields"].append({"name": "extra", "type": "int", "default": 0})
    parsed = fastavro.parse_schema(schema)
    data = write_with(parsed, sample_datum(copy.deepcopy(schema), {}))
    with pytest.raises(SchemaError, match="unknown writer schema"):
        codec.decode(data, BY_SCHEMA_NAME["forge.QueueEntry"])
