"""etcd's JSON ⇄ protobuf messages, as etcd's gateway maps them: the .proto field names, bytes
base64, 64-bit integers strings, enums by name, zero fields omitted.

The same mapping as ``google.protobuf.json_format``'s ``ParseDict`` and ``MessageToDict(…,
preserving_proto_field_name=True)`` for the messages of etcd's API (no maps, no well-known
types), at a fraction of their CPU: a lock attempt's txn converts in about a fifth of the time
(measured; tests/stores/etcd/test_etcd_transports.py checks both give the same). Each message
type's fields are read from its descriptor once.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Any

from ..._errors import InvalidArgument

JSON = dict[str, Any]
# google.protobuf.descriptor.FieldDescriptor's type and label numbers.
_BYTES, _STRING, _BOOL, _ENUM, _MESSAGE = 12, 9, 8, 14, 11
_INT64 = frozenset({3, 4, 6, 16, 18})  # int64, uint64, fixed64, sfixed64, sint64: strings

Field = tuple[str, int, bool, Any]
"""(name, type, repeated, the enum or message descriptor)."""
_fields: dict[Any, dict[str, Field]] = {}


def _of(descriptor: Any) -> dict[str, Field]:
    """The fields of a message type by .proto name and by JSON name (``ParseDict`` takes
    both), remembered."""
    found = _fields.get(descriptor)
    if found is None:
        found = {}
        for field in descriptor.fields:
            sub = field.message_type or field.enum_type
            entry = (field.name, field.type, field.is_repeated, sub)
            found[field.name] = found[field.json_name] = entry
        _fields[descriptor] = found
    return found


def _scalar(kind: int, sub: Any, value: Any) -> Any:
    if kind == _BYTES:
        return base64.b64decode(value, validate=True)
    if kind == _ENUM:
        return sub.values_by_name[value].number if isinstance(value, str) else int(value)
    if kind in (_STRING, _BOOL):
        return value  # protobuf checks the type as it is set
    if isinstance(value, (bool, float)):
        raise ValueError("not an integer")
    return int(value)  # every other type etcd uses is an integer (as a string or a number)


def fill(message: Any, data: JSON) -> Any:
    """``message`` with the fields of ``data`` (etcd's JSON) set; a bad field or value is
    `InvalidArgument`."""
    fields = _of(message.DESCRIPTOR)
    for key, value in data.items():
        entry = fields.get(key)
        if entry is None:
            raise InvalidArgument(f"{message.DESCRIPTOR.name} has no field {key!r}")
        name, kind, repeated, sub = entry
        if value is None:
            continue
        try:
            if kind == _MESSAGE:
                if repeated:
                    items = getattr(message, name)
                    for item in value:
                        fill(items.add(), item)
                else:
                    part = getattr(message, name)
                    fill(part, value)
                    part.SetInParent()  # set even when empty ({}): a oneof's choice
            elif repeated:
                getattr(message, name).extend(_scalar(kind, sub, item) for item in value)
            else:
                setattr(message, name, _scalar(kind, sub, value))
        except InvalidArgument:
            raise
        except (ValueError, TypeError, KeyError, AttributeError, binascii.Error) as exc:
            raise InvalidArgument(
                f"{message.DESCRIPTOR.name}.{name}: bad value {value!r} ({exc})"
            ) from None
    return message


_converters: dict[Any, Callable[[Any], Any]] = {}


def _converter(field: Any) -> Callable[[Any], Any]:
    """How a value of ``field`` is written in JSON, remembered."""
    convert = _converters.get(field)
    if convert is None:
        kind, enum = field.type, field.enum_type
        if kind == _BYTES:
            convert = _base64
        elif kind in _INT64:
            convert = str
        elif kind == _ENUM:
            names = {value.number: value.name for value in enum.values}
            convert = lambda number: names.get(number, number)  # noqa: E731
        elif kind == _MESSAGE:
            convert = to_json
        else:
            convert = _same
        _converters[field] = convert
    return convert


def _base64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def _same(value: Any) -> Any:
    return value


def to_json(message: Any) -> JSON:
    """``message`` as etcd's JSON (only the fields set to other than their zero)."""
    out: JSON = {}
    for field, value in message.ListFields():
        convert = _converter(field)
        if field.is_repeated:
            out[field.name] = [convert(item) for item in value]
        else:
            out[field.name] = convert(value)
    return out
