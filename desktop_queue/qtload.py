"""Loads PySide6 for the window and the worker without its source scan of every later import.

Importing PySide6 replaces Python's ``__import__`` with a hook that serves PySide's
opt-in ``from __feature__ import snake_case, true_property``. After every import from
then on, the hook asks of the module it returned whether it uses PySide, once per
module name, by reading its whole source (``inspect.getsource``) and looking for the
word "PySide6"; the lines stay in :mod:`linecache` for the life of the process. The
window names hundreds of modules after Qt: reading them is a good part of its
start-up, and their source then sits in its memory, megabytes of it. A ``work``
process pays the same for each module it names after Qt. (napari issue 8584 traced the
same cost in another app.)

Desktop Queue selects no ``__feature__``. Importing this module (before the other
modules of whatever imports Qt) answers the question without reading anything:
every module counts as using PySide with no feature selected, which is what the scan
finds for ours and what PySide assumes for any module whose name it has not seen. A
plug-in that does select a feature still gets it: the selection sets its module's
entry itself. Should a PySide6 release scan differently, nothing here applies.
"""

from __future__ import annotations

import sys
from types import ModuleType

import PySide6.QtCore  # noqa: F401  (installs the hook whose scan is turned off below)

#: the module of PySide6's ``__feature__`` support, holding the scan
FEATURE_MODULE = "shibokensupport.feature"


def _uses_pyside_without_features(module: ModuleType) -> bool:
    return True


def skip_source_scan() -> bool:
    """Turns the scan off (idempotent); False when this PySide6 has no such scan."""
    feature = sys.modules.get(FEATURE_MODULE)
    if feature is None or not callable(getattr(feature, "_mod_uses_pyside", None)):
        return False
    feature._mod_uses_pyside = _uses_pyside_without_features  # type: ignore[attr-defined]
    return True


skip_source_scan()
