"""The local HTTP API (``desktop-queue serve``, or inside the window): FastAPI on uvicorn, 127.0.0.1 only.

No Qt here (an import-linter contract says so): the window starts :class:`.server.ApiServer`
on a thread of its own, the command line in the foreground.
"""

#: the only address the API listens on: it is for this machine's own programs
HOST = "127.0.0.1"
#: the port of ``desktop-queue serve`` and of the window's API unless told
DEFAULT_PORT = 8765
