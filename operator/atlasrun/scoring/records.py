"""Versioned persisted records: every file AtlasRun writes and reads back carries ``schema_version``.

A reader accepts the current version and the previous one (version 1 is the unversioned shape
written before records were versioned, so older results directories still load). The previous
shape is upgraded by the record's ``upgrade_v1`` (the only place an old record is reinterpreted).
Any other version is refused with a ``RecordVersionError`` naming the file, the line and the
version, never skipped silently.
"""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar, Self, TypeVar

from pydantic import BaseModel

from atlasrun.errors import AtlasError
from atlasrun.tasks.sizes import check_unicode

CURRENT_VERSION = 2
PREVIOUS_VERSION = 1  # the unversioned shape: no ``schema_version`` field


class RecordVersionError(AtlasError):
    """A stored record of a schema version this AtlasRun cannot read."""

    def __init__(self, record: str, version: object, where: str) -> None:
        self.version = version
        self.where = where
        super().__init__(
            f"{where}: {record} has schema_version {version!r}; this AtlasRun reads versions "
            f"{PREVIOUS_VERSION} and {CURRENT_VERSION} (a newer AtlasRun wrote it, or the file is damaged)"
        )


class VersionedRecord(BaseModel):
    """Base of every persisted record. Subclasses override ``upgrade_v1`` when their shape changed."""

    RECORD: ClassVar[str] = "record"  # what the record is, for messages ("results line", ...)
    schema_version: int = CURRENT_VERSION

    @classmethod
    def upgrade_v1(cls, data: dict[str, Any]) -> dict[str, Any]:
        """Version 1 (unversioned) -> current. Only called by ``from_data``."""
        return data

    @classmethod
    def from_data(cls, data: Any, where: str) -> Self:
        """Validate a decoded record of the current or previous version (ValueError if malformed)."""
        if not isinstance(data, dict):
            raise ValueError(f"a {cls.RECORD} is a JSON object, got {type(data).__name__}")
        version = data.get("schema_version", PREVIOUS_VERSION)
        if isinstance(version, bool) or version not in (PREVIOUS_VERSION, CURRENT_VERSION):
            raise RecordVersionError(cls.RECORD, version, where)
        if version == PREVIOUS_VERSION:
            data = {**cls.upgrade_v1(dict(data)), "schema_version": CURRENT_VERSION}
        return cls.model_validate(data)

    @classmethod
    def from_json(cls, text: str | bytes, where: str) -> Self:
        """Parse one stored record (ValueError if it is not UTF-8 JSON, holds text that is not
        valid Unicode, or is not this record)."""
        if isinstance(text, bytes):
            try:
                text = text.decode("utf-8")
            except UnicodeDecodeError as exc:  # a ValueError, but its message shows raw bytes
                raise ValueError(f"not valid UTF-8 (byte {exc.start})") from None
        try:
            data = json.loads(text)
        except RecursionError:
            raise ValueError("JSON nested too deeply") from None
        if SURROGATE_ESCAPE.search(text):
            check_unicode(data)
        return cls.from_data(data, where)


# A JSON escape of a UTF-16 surrogate: a valid pair decodes to one character, a lone one to a
# string no later stage can write (record_key, append_line encode to UTF-8).
SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


M = TypeVar("M", bound=VersionedRecord)
