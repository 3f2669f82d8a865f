"""What a person typed in New job and did not submit, kept for the next New job.

A window closed by a logout, a shutdown or ``kill`` has nobody to answer "Discard this
prompt?", so it puts what was typed aside instead (see the window's ``SubmitDialog``).
The draft lives in the data dir, ``drafts/<name>.json``, beside the jobs whose prompts it
is like, and not in the settings file: settings are configuration, which people copy
between machines and keep with their dotfiles, and a prompt is their content.

It is written atomically and durably (a logout may be followed by a power cut), and
taken once: the next New job reads it and removes it. A damaged draft is set aside
(``*.corrupt-<time>``) and said in the log, never silently dropped; one written by a
newer version is left as it is.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from pathlib import Path

import orjson

from desktop_queue.core.store.codec import stamped_doc
from desktop_queue.core.store.fileio import atomic_write, make_dirs, set_aside_if_possible

log = logging.getLogger(__name__)

DRAFTS_DIR = "drafts"
DRAFT_FORMAT = "desktop-queue.draft"
DRAFT_SCHEMA = 1
#: the draft of the New job dialog
NEW_JOB = "new-job"


def draft_path(data_dir: Path, name: str) -> Path:
    """Where the draft ``name`` of ``data_dir`` is kept."""
    return Path(data_dir) / DRAFTS_DIR / f"{name}.json"


def keep_draft(data_dir: Path, name: str, fields: Mapping[str, str]) -> Path:
    """Keeps ``fields`` (field name -> text) as the draft ``name``, replacing one kept before.

    Returns:
        The draft's path.

    Raises:
        StoreError: the disk refused it (full, read-only); nothing was changed.
    """
    path = draft_path(data_dir, name)
    make_dirs(path.parent)
    doc = {"format": DRAFT_FORMAT, "schema_version": DRAFT_SCHEMA, "fields": dict(fields)}
    atomic_write(path, orjson.dumps(doc))
    return path


def take_draft(
    data_dir: Path, name: str, accept: Callable[[dict[str, str]], bool] | None = None
) -> dict[str, str] | None:
    """The draft ``name``, removed from the disk (it is the caller's now); None when there is none.

    A draft that ``accept`` refuses (one the caller cannot open now) is left in place for
    later, and None returned. A draft that cannot be read as one is set aside and None
    returned; one of a newer version is left in place for that version, and None returned.
    """
    path = draft_path(data_dir, name)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("the draft %s could not be read (%s): left where it is", path, exc.strerror or exc)
        return None
    try:
        doc, newer = stamped_doc(raw, DRAFT_FORMAT, DRAFT_SCHEMA, "a draft")
        if newer is not None:
            log.warning("the draft %s was written by a newer Desktop Queue (schema %s): left as it is", path, newer)
            return None
        fields = doc.get("fields")
        if not isinstance(fields, dict) or not all(isinstance(v, str) for v in fields.values()):
            raise ValueError("its fields are not text")
    except ValueError as exc:  # (orjson.JSONDecodeError is one)
        aside = set_aside_if_possible(path)
        log.warning("the draft %s was damaged (%s): kept aside as %s", path, exc, aside.name)
        return None
    draft = {str(k): v for k, v in fields.items()}
    if accept is not None and not accept(draft):
        return None
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    return draft
