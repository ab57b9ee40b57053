"""OTLP/HTTP on the wire: media types, compression, protobuf and JSON request decoding, and the
response and `google.rpc.Status` encodings. The view (`api/otlp.py`) answers with these; the mapping
of spans to agent turns is `sources/otlp.py`."""

from __future__ import annotations

import base64
import json
import re
import zlib
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


class OtlpError(Exception):
    """A request refused as a whole; `status` is the HTTP answer."""

    status = 400

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class UnsupportedMediaType(OtlpError):
    status = 415


class PayloadTooLarge(OtlpError):
    status = 413


def media_type(content_type: str) -> str:
    """ "protobuf" or "json" for the request's Content-Type; UnsupportedMediaType otherwise."""
    base = content_type.split(";", 1)[0].strip().lower()
    if base in ("application/x-protobuf", "application/protobuf"):
        return "protobuf"
    if base == "application/json":
        return "json"
    raise UnsupportedMediaType(
        f"Unsupported Content-Type {base or '(none)'!r}: send application/x-protobuf or application/json."
    )


def decompress(body: bytes, content_encoding: str, limit: int) -> bytes:
    """The body with its Content-Encoding (gzip, deflate or none) undone, refused past `limit` bytes."""
    encoding = content_encoding.strip().lower()
    if encoding in ("", "identity"):
        data = body
    elif encoding in ("gzip", "deflate"):
        # wbits 47 reads gzip or zlib headers; raw deflate (-15) is tried for deflate bodies without one.
        attempts = (47,) if encoding == "gzip" else (47, -15)
        for wbits in attempts:
            inflater = zlib.decompressobj(wbits)
            try:
                data = inflater.decompress(body, limit + 1)
                if len(data) <= limit and not inflater.eof and not inflater.unconsumed_tail:
                    raise zlib.error("truncated stream")
            except zlib.error as exc:
                if wbits == attempts[-1]:
                    raise OtlpError(f"The body is not valid {encoding} data: {exc}.") from None
                continue
            break
    else:
        raise UnsupportedMediaType(f"Unsupported Content-Encoding {encoding!r}: send gzip, deflate or none.")
    if len(data) > limit:
        raise PayloadTooLarge(f"The decompressed body is over {limit} bytes; export smaller batches.")
    return data


_HEX_LENGTHS = {
    "traceId": 32,
    "spanId": 16,
    "parentSpanId": 16,
    "trace_id": 32,
    "span_id": 16,
    "parent_span_id": 16,
}


_HEX = re.compile(r"[0-9a-fA-F]*\Z")


def _hex_ids_to_base64(node: Any) -> Any:
    """OTLP JSON writes trace and span ids in hex; protobuf's JSON mapping reads bytes as base64.
    Hex of the right length (32 or 16 digits) is converted; anything else is left to the parser, so
    base64 ids are read too (their lengths differ: 24 and 12)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _HEX_LENGTHS and isinstance(value, str):
                if len(value) == _HEX_LENGTHS[key] and _HEX.match(value):
                    node[key] = base64.b64encode(bytes.fromhex(value)).decode()
            else:
                _hex_ids_to_base64(value)
    elif isinstance(node, list):
        for item in node:
            _hex_ids_to_base64(item)
    return node


def decode_request(data: bytes, encoding: str) -> ExportTraceServiceRequest:
    """An ExportTraceServiceRequest from an (uncompressed) body; OtlpError when it is not one."""
    request = ExportTraceServiceRequest()
    if encoding == "protobuf":
        try:
            request.ParseFromString(data)
        except (DecodeError, RuntimeError, ValueError) as exc:
            raise OtlpError(f"The body is not a protobuf ExportTraceServiceRequest: {exc}") from None
        return request
    try:
        tree = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise OtlpError(f"The body is not JSON: {exc}") from None
    if not isinstance(tree, dict):
        raise OtlpError("The body is not an OTLP JSON ExportTraceServiceRequest: expected an object.")
    try:
        json_format.ParseDict(_hex_ids_to_base64(tree), request, ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, TypeError, RecursionError) as exc:
        raise OtlpError(f"The body is not an OTLP JSON ExportTraceServiceRequest: {exc}") from None
    return request


def encode_response(rejected: int, message: str, encoding: str) -> bytes:
    """An ExportTraceServiceResponse; partial_success only when something was refused or said."""
    response = ExportTraceServiceResponse()
    if rejected or message:
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = message
    if encoding == "protobuf":
        return response.SerializeToString()
    return json_format.MessageToJson(response, indent=None).encode()


def encode_status(code: int, message: str, encoding: str) -> bytes:
    """A google.rpc.Status (the OTLP/HTTP error body) in the request's encoding. Written by hand:
    googleapis-common-protos is not a runtime dependency. Fields: 1 code (int32), 2 message."""
    if encoding == "json":
        return json.dumps({"code": code, "message": message}).encode()
    text = message.encode()
    return b"\x08" + _varint(code) + b"\x12" + _varint(len(text)) + text


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)
