"""One window per data directory, and a second start brings that window forward.

The window holds ``gui.lock`` (see :class:`desktop_queue.app.InstanceLock`) and listens
on a local socket named after its data directory. A second ``desktop-queue gui`` on the
same directory finds the lock taken, asks the window through that socket to show
itself, and exits, as most desktop apps do; only when no window answers (one that hangs,
or a version without the socket) does it explain instead.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtNetwork import QLocalServer, QLocalSocket

log = logging.getLogger(__name__)

#: what the second start sends, and the window answers once it has shown itself
ASK = b"show\n"
SHOWN = b"shown\n"
#: how long a second start waits for the running window to answer
ANSWER_MS = 2000


def server_name(data_dir: Path) -> str:
    """The local socket of the window on ``data_dir``: per user and per directory.

    A name, not a path: Qt puts it in the temp directory (a named pipe on Windows), so a
    long data directory cannot exceed a socket path's length limit.
    """
    where = str(Path(data_dir).resolve())
    user = os.getuid() if hasattr(os, "getuid") else os.environ.get("USERNAME", "")
    return f"desktop-queue-{user}-{hashlib.sha256(where.encode()).hexdigest()[:16]}"


class ActivationServer(QObject):
    """Listens for second starts on the window's data directory; emits :attr:`asked` for each.

    Args:
        data_dir: the data directory whose ``gui.lock`` this process holds. Holding it is
            what makes removing a socket left by a crashed window safe.
    """

    asked = Signal()

    def __init__(self, data_dir: Path, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.name = server_name(data_dir)
        self.server = QLocalServer(self)
        self.server.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)
        self.server.newConnection.connect(self._accept)
        QLocalServer.removeServer(self.name)  # a crashed window's socket file (Unix)
        if not self.server.listen(self.name):
            # the window works as before; a second start explains instead of raising it
            log.warning("a second start cannot reach this window: %s", self.server.errorString())

    @property
    def listening(self) -> bool:
        return self.server.isListening()

    def close(self) -> None:
        self.server.close()

    def _accept(self) -> None:
        while (socket := self.server.nextPendingConnection()) is not None:
            socket.setParent(self)
            socket.readyRead.connect(lambda s=socket: self._read(s))
            socket.disconnected.connect(socket.deleteLater)
            if socket.bytesAvailable():
                self._read(socket)

    def _read(self, socket: QLocalSocket) -> None:
        if not socket.canReadLine():
            if socket.bytesAvailable() > len(ASK):
                socket.abort()  # not one of ours
            return
        if bytes(socket.readLine().data()) == ASK:
            self.asked.emit()
            socket.write(SHOWN)
            socket.flush()
        socket.disconnectFromServer()


def ask_running_window(data_dir: Path, timeout_ms: int | None = None) -> bool:
    """Asks the window on ``data_dir`` to show itself; True once it answered that it did.

    Blocks for at most about ``timeout_ms`` (default :data:`ANSWER_MS`; no event loop needed).
    """
    timeout_ms = ANSWER_MS if timeout_ms is None else timeout_ms
    socket = QLocalSocket()
    socket.connectToServer(server_name(data_dir))
    try:
        if not socket.waitForConnected(timeout_ms):
            return False
        socket.write(ASK)
        if not socket.waitForBytesWritten(timeout_ms):
            return False
        answer = b""
        while not answer.endswith(b"\n"):
            if not socket.waitForReadyRead(timeout_ms):
                return False
            answer += bytes(socket.readAll().data())
        return answer == SHOWN
    finally:
        socket.abort()
