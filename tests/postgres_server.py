"""A real PostgreSQL server for the tests of searches whose study is in a database: Debian's
``postgresql`` package (``/usr/lib/postgresql/VERSION/bin``), a new cluster in a temporary
directory, on a free port of 127.0.0.1, with trust authentication, stopped at the end.

PostgreSQL refuses to run as root: as root, the cluster belongs to the ``postgres`` system
user (which the package creates) and the server runs as it.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile

from .gcs_emulator import free_port


def binaries() -> str | None:
    """The directory of initdb and pg_ctl of the newest PostgreSQL installed, or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(p.split("/")[-3]) if p.split("/")[-3].isdigit() else 0)
    return os.path.dirname(found[-1]) if found else None


class Server:
    """A PostgreSQL cluster running until :meth:`stop`; :attr:`url` is its SQLAlchemy URL
    (database ``postgres``, user ``postgres``, no password)."""

    def __init__(self, bin_dir: str):
        self.bin_dir, self.port = bin_dir, free_port()
        self.directory = tempfile.mkdtemp(prefix="postgres-")
        self.user = None
        if os.geteuid() == 0:
            self.user = "postgres"
            entry = pwd.getpwnam(self.user)
            os.chown(self.directory, entry.pw_uid, entry.pw_gid)
        data = os.path.join(self.directory, "data")
        self._run("initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8")
        self._run("pg_ctl", "-D", data, "-l", os.path.join(self.directory, "server.log"), "-w",
                  "-o", f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1",
                  "start")
        self.data = data
        self.url = f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        out = subprocess.run([os.path.join(self.bin_dir, tool), *args], capture_output=True,
                             text=True, timeout=120, user=self.user, cwd=self.directory)
        if out.returncode != 0:
            raise RuntimeError(f"{tool} failed: {out.stderr.strip() or out.stdout.strip()}")

    def create_database(self, name: str) -> str:
        """A new empty database; returns its URL."""
        import psycopg2

        connection = psycopg2.connect(host="127.0.0.1", port=self.port, user="postgres",
                                      dbname="postgres")
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE "{name}"')
        connection.close()
        return self.url.rsplit("/", 1)[0] + f"/{name}"

    def stop(self) -> None:
        self._run("pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop")
        shutil.rmtree(self.directory, ignore_errors=True)
