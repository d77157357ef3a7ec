"""The controller's local admin socket: the live view for `otcp-controller status`.

A unix stream socket (`admin.socket` in the configuration, in the
controller's state directory when installed). It is read-only: the
controller reads nothing from a client; it writes the live view as one
JSON document and closes. Who may connect is decided by the socket file's
permissions (the controller's user and group under the units' umask).
"""

import contextlib
import errno
import json
import os
import socket
import time
from collections.abc import Callable
from typing import Any

#: How long `read_status` waits for the whole document.
READ_TIMEOUT_S = 10.0
#: The largest document `read_status` accepts (a big fabric's paths included).
MAX_STATUS_BYTES = 256 * 1024 * 1024


class AdminError(Exception):
    """The admin socket could not be used: names the socket and the problem."""


class AdminServer:
    """Serves `status(now)` to every connection on a unix socket, from green threads."""

    def __init__(self, path: str, status: Callable[[float], dict], logger: Any) -> None:
        self.path = path
        self.status = status
        self.log = logger
        self._listener: Any = None
        # os-ken's hub (eventlet) only where the server runs: a client of
        # `read_status` (otcp-experiment, otcp-controller status) must not
        # import eventlet, whose deprecation warning would reach its stderr.
        from os_ken.lib import hub

        self._hub = hub

    def start(self) -> Any:
        """Listen (replacing a socket file no controller answers on); returns the accept thread."""
        if _answers(self.path):
            raise AdminError(f"admin.socket: {self.path}: another controller is answering on it")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        self._listener = self._hub.listen(self.path, family=socket.AF_UNIX)
        self.log.info("admin socket at %s", self.path)
        return self._hub.spawn(self._accept_loop)

    def stop(self) -> None:
        """Stop listening and remove the socket file."""
        if self._listener is not None:
            self._listener.close()
            self._listener = None
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)

    def _accept_loop(self) -> None:
        while True:
            connection, _ = self._listener.accept()
            self._hub.spawn(self._answer, connection)

    def _answer(self, connection: Any) -> None:
        try:
            with self._hub.Timeout(READ_TIMEOUT_S):
                connection.sendall(json.dumps(self.status(time.time())).encode())
        except (OSError, self._hub.Timeout) as error:
            self.log.info("admin socket: a client went away before reading the status: %s", error)
        finally:
            connection.close()


def read_status(path: str, timeout: float = READ_TIMEOUT_S) -> dict:
    """Ask the controller listening on path for its live view."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(timeout)
        try:
            client.connect(path)
            chunks, size = [], 0
            while chunk := client.recv(1 << 20):
                chunks.append(chunk)
                size += len(chunk)
                if size > MAX_STATUS_BYTES:
                    raise AdminError(f"{path}: the status is larger than {MAX_STATUS_BYTES} bytes")
        except FileNotFoundError:
            raise AdminError(f"{path}: no such socket (is the controller running?)") from None
        except ConnectionRefusedError:
            raise AdminError(f"{path}: no controller answers (a stale socket?)") from None
        except PermissionError:
            raise AdminError(f"{path}: permission denied (run as the controller's user or root)") from None
        except TimeoutError:
            raise AdminError(f"{path}: no answer within {timeout:g} s") from None
        except OSError as error:
            raise AdminError(f"{path}: {error.strerror or error}") from None
    try:
        return json.loads(b"".join(chunks))
    except ValueError as error:
        raise AdminError(f"{path}: not a status document: {error}") from None


def _answers(path: str) -> bool:
    """True if something accepts connections on the unix socket at path."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(path)
        except OSError as error:
            if error.errno in (errno.ENOENT, errno.ECONNREFUSED, errno.ENOTSOCK):
                return False
            raise AdminError(f"admin.socket: {path}: {error.strerror or error}") from None
        return True
