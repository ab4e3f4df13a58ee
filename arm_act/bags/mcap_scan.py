"""Reading an MCAP file record by record, without its summary, as far as it is intact.

A writer killed mid-recording (BagWriter flushes whole chunks) leaves a prefix of complete
MCAP records followed by at most one partial record, and neither summary nor footer. The
summary-based readers (rosbags, `ros2 bag`) refuse such a file; this scanner returns every
message of the complete records and stops before the partial one, saying where.
"""
from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from contextlib import suppress
from io import BytesIO
from pathlib import Path

from mcap.data_stream import ReadDataStream
from mcap.exceptions import McapError
from mcap.opcode import Opcode
from mcap.records import Channel, Chunk, Message, Schema
from mcap.stream_reader import breakup_chunk
from rosbags.typesys import Stores, TypesysError, get_types_from_msg, get_typestore

MCAP_MAGIC = b"\x89MCAP0\r\n"
_RECORD_HEAD = struct.Struct("<BQ")  # opcode, record length


def has_mcap_footer(path: Path) -> bool:
    """True when the file ends with the MCAP magic that follows the footer."""
    if path.stat().st_size < 2 * len(MCAP_MAGIC):
        return False
    with path.open("rb") as stream:
        stream.seek(-len(MCAP_MAGIC), os.SEEK_END)
        return stream.read() == MCAP_MAGIC


def first_chunk_compression(path: Path) -> str:
    """The compression of the file's first chunk ("" for none or no chunk)."""
    with path.open("rb") as stream:
        stream.seek(len(MCAP_MAGIC))
        while True:
            head = stream.read(_RECORD_HEAD.size)
            if len(head) < _RECORD_HEAD.size:
                return ""
            opcode, length = _RECORD_HEAD.unpack(head)
            if opcode == Opcode.CHUNK:  # start, end, size (uint64), crc (uint32), compression (string)
                body = stream.read(32)
                if len(body) < 32:
                    return ""
                (text_length,) = struct.unpack_from("<I", body, 28)
                return stream.read(min(text_length, 16)).decode(errors="replace")
            if opcode == Opcode.FOOTER:
                return ""
            stream.seek(length, os.SEEK_CUR)


class McapScan:
    """One pass over an MCAP file; iterate messages(), then read `problem` and `complete`.

    schemas and channels fill up as the scan meets them (rosbags puts them in the first
    chunk). problem is None when the scan reached the footer, else where and why it stopped.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self.schemas: dict[int, Schema] = {}
        self.channels: dict[int, Channel] = {}
        self.problem: str | None = None
        self.complete = False
        self._store = None

    def messages(self) -> Iterator[Message]:
        size = self.path.stat().st_size
        with self.path.open("rb") as stream:
            if stream.read(len(MCAP_MAGIC)) != MCAP_MAGIC:
                self.problem = f"{self.path.name} is not an MCAP file"
                return
            while True:
                offset = stream.tell()
                head = stream.read(_RECORD_HEAD.size)
                if not head:
                    self.problem = f"{self.path.name} ends at byte {offset} without MCAP footer"
                    return
                if len(head) < _RECORD_HEAD.size:
                    self.problem = f"{self.path.name} is truncated in the record at byte {offset}"
                    return
                opcode, length = _RECORD_HEAD.unpack(head)
                if offset + _RECORD_HEAD.size + length > size:
                    self.problem = f"{self.path.name} is truncated in the record at byte {offset}"
                    return
                body = stream.read(length)
                if opcode == Opcode.FOOTER:
                    self.complete = True
                    return
                try:
                    yield from self._records(opcode, body)
                except (McapError, struct.error, ValueError, UnicodeDecodeError) as exc:
                    self.problem = f"{self.path.name} has a corrupt record at byte {offset} ({exc})"
                    return
                except Exception as exc:  # noqa: BLE001 - zstandard/lz4 errors of a damaged chunk
                    self.problem = f"{self.path.name} has an undecodable chunk at byte {offset} ({exc})"
                    return

    def _records(self, opcode: int, body: bytes) -> Iterator[Message]:
        data = ReadDataStream(BytesIO(body))
        if opcode == Opcode.CHUNK:
            records = breakup_chunk(Chunk.read(data), validate_crc=True)
        elif opcode == Opcode.SCHEMA:
            records = [Schema.read(data)]
        elif opcode == Opcode.CHANNEL:
            records = [Channel.read(data)]
        elif opcode == Opcode.MESSAGE:
            records = [Message.read(data, len(body))]
        else:
            return
        for record in records:
            if isinstance(record, Schema):
                self.schemas[record.id] = record
            elif isinstance(record, Channel):
                self.channels[record.id] = record
            elif isinstance(record, Message) and record.channel_id in self.channels:
                yield record

    def msgtype(self, channel_id: int) -> str:
        schema = self.schemas.get(self.channels[channel_id].schema_id)
        return schema.name if schema is not None else ""

    def typestore(self):
        """A type store of the definitions embedded in the file, as AnyReader builds one
        (built on first use, after the first chunk has supplied the schemas)."""
        if self._store is None:
            types = {}
            for schema in self.schemas.values():
                with suppress(TypesysError, UnicodeDecodeError):
                    types.update(get_types_from_msg(schema.data.decode(), schema.name))
            self._store = get_typestore(Stores.EMPTY)
            self._store.register(types)
        return self._store
