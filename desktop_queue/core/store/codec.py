"""How the store's files are spelled: journal records, segment names and headers, and reading a segment.

Every journal line is a record's JSON with a CRC-32 of that JSON appended as a field
(:func:`encode_record`); records are numbered store-wide (``n``), so a repeated, lost or
moved line is told apart from a good one (:func:`read_segment`).
"""

from __future__ import annotations

import logging
import os
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import orjson

from desktop_queue.core.errors import StoreCorrupt, StoreError
from desktop_queue.core.records import (
    HeaderRecord,
    Record,
)

log = logging.getLogger(__name__)


SNAPSHOT_FORMAT = "desktop-queue.snapshot"


JOURNAL_FORMAT = "desktop-queue.journal"


SCHEMA_VERSION = 4


_SEGMENT_RE = re.compile(r"^journal-(\d{12})\.jsonl$")


_SNAPSHOT_RE = re.compile(r"^snapshot-(\d{12})\.json$")


_SPARE_RE = re.compile(r"^spare-(\d{12})\.jsonl$")


_CRC_MARK = b',"crc":"'


def encode_record(record: Record) -> bytes:
    """One journal line: the record's JSON with a CRC-32 of that JSON appended as a field."""
    body = orjson.dumps(record)
    return body[:-1] + _CRC_MARK + b"%08x" % zlib.crc32(body) + b'"}\n'


def decode_record(line: bytes) -> Record | None:
    """Parses one journal line (without its newline); None if torn or checksum-failing."""
    cut = line.rfind(_CRC_MARK)
    if cut < 0 or not line.endswith(b'"}') or len(line) - cut != len(_CRC_MARK) + 10:
        return None
    body = line[:cut] + b"}"
    try:
        if zlib.crc32(body) != int(line[cut + len(_CRC_MARK) : -2], 16):
            return None
        record: Record = orjson.loads(body)  # (told apart by "op" alone when applied)
    except (ValueError, orjson.JSONDecodeError):
        return None
    return record if isinstance(record, dict) else None


def stamped_doc(raw: bytes, fmt: str, schema: int, what: str) -> tuple[dict[str, Any], int | None]:
    """The JSON object of a small state file stamped ``"format": fmt`` (a draft, the pause
    switch, the schedules...), and its ``schema_version`` when a newer version than
    ``schema`` wrote it (None: this version reads it). What a newer file means is the
    caller's to say.

    Raises:
        ValueError: not JSON (``orjson.JSONDecodeError`` is one), or not ``what`` ("not a draft").
    """
    doc = orjson.loads(raw)
    if not isinstance(doc, dict) or doc.get("format") != fmt:
        raise ValueError(f"not {what}")
    version = doc.get("schema_version")
    return doc, version if isinstance(version, int) and version > schema else None


def segment_name(gen: int) -> str:
    return f"journal-{gen:012d}.jsonl"


def snapshot_name(gen: int) -> str:
    return f"snapshot-{gen:012d}.json"


def spare_name(gen: int) -> str:
    return f"spare-{gen:012d}.jsonl"


def journal_header(gen: int) -> HeaderRecord:
    """The first record of journal segment ``gen``."""
    return {"op": "header", "format": JOURNAL_FORMAT, "schema_version": SCHEMA_VERSION, "gen": gen}


def new_segment_bytes(gen: int, size: int) -> bytes:
    """What segment ``gen`` is created with: its header, then zeros to ``size`` bytes
    (written as ``atomic_write(path, segment_head(gen), pad_to=size)``)."""
    header = segment_head(gen)
    return header + bytes(max(0, size - len(header)))


def segment_head(gen: int) -> bytes:
    """The first line of journal segment ``gen``."""
    return encode_record(journal_header(gen))


@dataclass
class SegmentRead:
    """What reading a journal segment from some offset found."""

    records: list[Record]
    end: int  # offset just after the last good, complete line
    torn_tail: bool = False  # an incomplete or checksum-failing *last* line
    bad_line: int | None = None  # offset of a bad line followed by good ones
    lost_after: list[Record] = field(default_factory=list)  # readable records after the bad line
    out_of_order: str | None = None  # why a checksummed record at bad_line was refused (its number)


_ZERO_CHUNK = bytes(1 << 18)
#: (not on Windows, which reads a segment whole)
_HAS_PREADV = hasattr(os, "preadv") and hasattr(os, "pread")


def _zeros_from(data: bytes, start: int) -> bool:
    """Whether every byte of ``data`` from ``start`` on is zero.

    Every open asks this of the unwritten rest of a segment (megabytes): compared a
    chunk at a time with zeros (``memcmp``), several times quicker than counting them.
    """
    step = len(_ZERO_CHUNK)
    return all(_zero(data[at : at + step]) for at in range(start, len(data), step))


def _zero(chunk: bytes | bytearray) -> bool:
    """Whether a chunk of at most :data:`_ZERO_CHUNK`'s size is all zeros (a whole-length
    slice of the constant is the constant itself: nothing is copied)."""
    return chunk == _ZERO_CHUNK[: len(chunk)]


def read_segment_file(path: Path) -> bytes:
    """A segment file's bytes, less the zeros that fill its unwritten rest.

    A segment is created filled with zeros to past its rotation threshold (megabytes),
    and every open reads the one being appended to, mostly zeros. The written part is
    read, and the rest compared with zeros a chunk at a time in one buffer, instead of
    being read into one large new object. Should the rest hold anything but zeros
    (writes a power cut left behind a hole), the whole file is returned, for
    :func:`read_segment` to report.
    """
    if not _HAS_PREADV:
        return path.read_bytes()
    step = len(_ZERO_CHUNK)
    fd = os.open(path, os.O_RDONLY)
    try:
        parts: list[bytes] = []
        offset = 0
        while True:
            chunk = os.pread(fd, step, offset)
            if not chunk:
                return b"".join(parts)  # written to its end
            zero = chunk.find(b"\0")
            if zero >= 0:
                parts.append(chunk[:zero])
                break
            parts.append(chunk)
            offset += len(chunk)
        zeros = _zeros_from(chunk, zero) and _zeros_in_file(fd, offset + len(chunk))
    except OSError as exc:
        if exc.filename is None:  # (a read names no file: the error the user sees must)
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise
    finally:
        os.close(fd)
    return b"".join(parts) if zeros else path.read_bytes()


def _zeros_in_file(fd: int, offset: int) -> bool:
    """Whether the file holds only zero bytes from ``offset`` to its end (read into one reused buffer)."""
    step = len(_ZERO_CHUNK)
    buf = bytearray(step)
    while (n := os.preadv(fd, [buf], offset)) > 0:
        if not _zero(buf if n == step else buf[:n]):
            return False
        offset += n
    return True


def _written_end(data: bytes, start: int = 0) -> int:
    """Where the written part of segment bytes ends: at the first zero byte, or the end."""
    end = data.find(b"\0", start)
    return len(data) if end < 0 else end


def read_segment(data: bytes, start: int, after_n: int | None = None) -> SegmentRead:
    """Splits ``data[start:]`` into verified records.

    With ``after_n`` (the number of the last record applied before these), every
    numbered record must carry the next number: a record that repeats one (a duplicated
    line), skips one (a deleted line) or goes back (swapped lines) is reported as a bad
    record at its offset, like one that fails its checksum, and nothing from it on is
    applied. A record without a number (written before numbering) is not checked.

    A segment is created filled with zero bytes (see :meth:`Store._start_segment`) and
    records overwrite them in order, so the first zero byte ends the written part (a
    record never contains one: JSON escapes it). Anything but zeros after that point
    can only be writes a power cut left behind a hole: it is reported as a bad record.
    """
    size = _written_end(data, start)
    if size < len(data) and not _zeros_from(data, size):
        out = _read_lines(data, start, size, after_n)
        if out.bad_line is None:
            out.bad_line = out.end
            out.torn_tail = False
            out.lost_after = [r for line in data[size:].split(b"\n") if (r := decode_record(line.strip(b"\0")))]
        return out
    return _read_lines(data, start, size, after_n)


def _read_lines(data: bytes, start: int, size: int, after_n: int | None = None) -> SegmentRead:
    out = SegmentRead(records=[], end=start)
    pos = start
    while pos < size:
        nl = data.find(b"\n", pos, size)
        if nl < 0:
            out.torn_tail = True  # no newline: a write that never finished
            break
        record = decode_record(data[pos:nl])
        if record is not None and after_n is not None:
            number = record.get("n")
            if isinstance(number, int):
                if after_n > 0 and number != after_n + 1:
                    out.bad_line = pos
                    out.out_of_order = f"record {number} where {after_n + 1} was due"
                    out.lost_after = [r for line in data[pos:size].split(b"\n") if (r := decode_record(line))]
                    break
                after_n = number
        if record is None:
            if data.find(b"\n", nl + 1, size) < 0 and not data[nl + 1 : size].strip():
                out.torn_tail = True  # the last complete-looking line is torn
                break
            out.bad_line = pos
            rest = SegmentRead(records=[], end=nl + 1)
            p = nl + 1
            while p < size:
                n = data.find(b"\n", p, size)
                if n < 0:
                    break
                r = decode_record(data[p:n])
                if r is not None:
                    rest.records.append(r)
                p = n + 1
            out.lost_after = rest.records
            break
        out.records.append(record)
        pos = nl + 1
        out.end = pos
    return out


def _check_header(record: Record, name: str) -> None:
    if record.get("op") != "header" or record.get("format") != JOURNAL_FORMAT:
        raise StoreCorrupt(f"{name} does not start with a journal header")
    version = cast(HeaderRecord, record).get("schema_version", 0)
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"{name} was written by a newer Desktop Queue (schema {version}, this one reads {SCHEMA_VERSION}); "
            "it has not been touched: please upgrade"
        )
