"""Avro codec for every record, in Avro's single-object encoding.

Each message starts with ``C3 01`` and the CRC-64-AVRO fingerprint of the writer's schema, so a
reader always knows which schema version wrote it and resolves it against its own — that is
what lets schemas evolve without a registry service. Parsed schemas are built once per process.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import fastavro
import fastavro.schema
import numpy as np

from schemas.errors import SchemaError
from schemas.records import BY_SCHEMA_NAME, EventKind, Record

MAGIC = b"\xc3\x01"
HEADER_LEN = len(MAGIC) + 8
SCHEMA_DIR = Path(__file__).parent / "avro"
RELEASED_DIR = Path(__file__).parent / "released"

R = TypeVar("R", bound=Record)


@dataclasses.dataclass(frozen=True)
class SchemaSet:
    """All schemas of one version, parsed, with their fingerprints."""

    version: str
    parsed: dict[str, dict[str, Any]]
    fingerprints: dict[str, bytes]

    @classmethod
    def load(cls, directory: Path, version: str) -> SchemaSet:
        raw = {}
        for path in sorted(directory.glob("*.avsc")):
            schema = json.loads(path.read_text())
            raw[f"{schema['namespace']}.{schema['name']}"] = schema
        parsed: dict[str, dict[str, Any]] = {}
        fingerprints: dict[str, bytes] = {}
        for name, schema in raw.items():
            expanded = expand_references(schema, raw)
            parsed[name] = typing.cast(dict[str, Any], fastavro.parse_schema(expanded))
            fingerprints[name] = fingerprint(expanded)
        return cls(version, parsed, fingerprints)


def expand_references(schema: Any, named: dict[str, Any], seen: set[str] | None = None) -> Any:
    """Inline every named reference at its first use, so the schema stands alone.

    A fingerprint must change when any nested schema changes, which it only does over the
    fully expanded form (fastavro's expand_schema stops one level deep).
    """
    seen = set() if seen is None else seen
    if isinstance(schema, str):
        if schema in named and schema not in seen:
            return expand_references(named[schema], named, seen)
        return schema
    if isinstance(schema, list):
        return [expand_references(branch, named, seen) for branch in schema]
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    if schema.get("type") in ("record", "enum", "fixed"):
        seen.add(f"{schema.get('namespace', '')}.{schema['name']}".lstrip("."))
    if "fields" in schema:
        out["fields"] = [
            {**f, "type": expand_references(f["type"], named, seen)} for f in schema["fields"]
        ]
    for key in ("items", "values"):
        if key in schema:
            out[key] = expand_references(schema[key], named, seen)
    if isinstance(schema.get("type"), dict | list):
        out["type"] = expand_references(schema["type"], named, seen)
    return out


def fingerprint(schema: dict[str, Any]) -> bytes:
    """CRC-64-AVRO of the parsing canonical form, little-endian, as the Avro spec defines."""
    canonical = fastavro.schema.to_parsing_canonical_form(fastavro.parse_schema(schema))
    return bytes.fromhex(fastavro.schema.fingerprint(canonical, "CRC-64-AVRO"))


@functools.cache
def current_schemas() -> SchemaSet:
    return SchemaSet.load(SCHEMA_DIR, "current")


@functools.cache
def released_schemas() -> tuple[SchemaSet, ...]:
    """Frozen copies of every released schema version; their data must stay readable."""
    return tuple(SchemaSet.load(d, d.name) for d in sorted(RELEASED_DIR.iterdir()) if d.is_dir())


@functools.cache
def _writers() -> dict[bytes, tuple[str, dict[str, Any]]]:
    known: dict[bytes, tuple[str, dict[str, Any]]] = {}
    for schema_set in (*released_schemas(), current_schemas()):
        for name, fp in schema_set.fingerprints.items():
            known[fp] = (name, schema_set.parsed[name])
    return known


# --- record <-> Avro datum -------------------------------------------------------------------

ToAvro = Callable[[Any], Any]
FromAvro = Callable[[Any], Any]


def _identity(value: Any) -> Any:
    return value


def _packer(dtype: str) -> tuple[ToAvro, FromAvro]:
    np_dtype = np.dtype(dtype)

    def pack(arr: Any) -> bytes:
        return np.asarray(arr, dtype=np_dtype).tobytes()

    def unpack(data: bytes) -> Any:
        return np.frombuffer(data, dtype=np_dtype)

    return pack, unpack


Plan = tuple[tuple[str, ToAvro, FromAvro], ...]
_plans: dict[type[Record], Plan] = {}


def _plan(cls: type[Record]) -> Plan:
    """Per-field converters of a record type, built once per type."""
    plan = _plans.get(cls)
    if plan is None:
        plan = _plans[cls] = _build_plan(cls)
    return plan


def _build_plan(cls: type[Record]) -> Plan:
    hints = typing.get_type_hints(cls)
    plan: list[tuple[str, ToAvro, FromAvro]] = []
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        hint = hints[f.name]
        to: ToAvro = _identity
        back: FromAvro = _identity
        if "packed" in f.metadata:
            to, back = _packer(f.metadata["packed"])
        elif hint is EventKind:
            to, back = str, EventKind
        elif isinstance(hint, type) and issubclass(hint, Record):
            to, back = to_datum, functools.partial(from_datum, hint)
        elif typing.get_origin(hint) is list:
            (item,) = typing.get_args(hint)
            if isinstance(item, type) and issubclass(item, Record):
                to = functools.partial(_map, to_datum)
                back = functools.partial(_map, functools.partial(from_datum, item))
        elif _is_record_union(hint):
            to, back = _tagged, _untagged
        plan.append((f.name, to, back))
    return tuple(plan)


def _map(fn: Callable[[Any], Any], values: list[Any]) -> list[Any]:
    return [fn(v) for v in values]


def _is_record_union(hint: Any) -> bool:
    args = typing.get_args(hint)
    return len(args) > 1 and all(isinstance(a, type) and issubclass(a, Record) for a in args)


def _tagged(record: Record) -> tuple[str, dict[str, Any]]:
    return (record.schema_name, to_datum(record))


def _untagged(value: tuple[str, dict[str, Any]]) -> Record:
    name, datum = value
    return from_datum(BY_SCHEMA_NAME[name], datum)


def to_datum(record: Record) -> dict[str, Any]:
    return {name: to(getattr(record, name)) for name, to, _ in _plan(type(record))}


def from_datum(cls: type[R], datum: dict[str, Any]) -> R:
    return cls(**{name: back(datum[name]) for name, _, back in _plan(cls)})


# --- bytes ------------------------------------------------------------------------------------


def encode(record: Record) -> bytes:
    """Serialize with the current schema of the record's type."""
    schemas = current_schemas()
    name = record.schema_name
    out = io.BytesIO()
    out.write(MAGIC)
    out.write(schemas.fingerprints[name])
    fastavro.schemaless_writer(out, schemas.parsed[name], to_datum(record))
    return out.getvalue()


def decode(data: bytes, cls: type[R]) -> R:
    """Deserialize bytes written by any known version of ``cls``'s schema."""
    record = decode_any(data, expect=cls.schema_name)
    assert isinstance(record, cls)
    return record


def decode_any(data: bytes, expect: str | None = None) -> Record:
    """Deserialize any known record; ``expect`` rejects records of another type."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise SchemaError("no value (a tombstone) where a record belongs", schema_name=expect)
    if len(data) < HEADER_LEN or data[:2] != MAGIC:
        raise SchemaError("not an Avro single-object message (bad magic)", schema_name=expect)
    writer = _writers().get(bytes(data[2:HEADER_LEN]))
    if writer is None:
        raise SchemaError(
            f"unknown writer schema fingerprint {bytes(data[2:HEADER_LEN]).hex()}",
            schema_name=expect,
        )
    name, writer_schema = writer
    if expect is not None and name != expect:
        raise SchemaError(f"expected {expect}, got {name}", schema_name=expect)
    reader_schema = current_schemas().parsed[name]
    try:
        datum = fastavro.schemaless_reader(
            io.BytesIO(data[HEADER_LEN:]),
            writer_schema,
            None if writer_schema is reader_schema else reader_schema,
            return_record_name=True,
            return_record_name_override=True,
        )
        return from_datum(BY_SCHEMA_NAME[name], datum)  # type: ignore[arg-type]
    except Exception as exc:  # truncated or corrupt bodies: fastavro and numpy raise many types
        raise SchemaError(f"corrupt {name} body: {exc!r}", schema_name=name) from exc
