"""A real PostgreSQL server for the fleet tests: Debian's `postgresql` binaries (.ci/run installs
them), a cluster in a temporary directory, listening on 127.0.0.1 only, password authentication
(scram-sha-256, set with --pwfile) for every connection. initdb refuses to run as root, so as
root the server runs as an unprivileged user (Debian's `postgres`, else one created here)."""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

SUPERUSER = "mmtune"
FALLBACK_USER = "mmtune-pg"  # created (useradd --system) when running as root without `postgres`


class MissingServer(RuntimeError):
    pass


def server_binaries() -> Path:
    """The directory holding initdb and pg_ctl."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if candidates:
        return Path(candidates[-1]).parent
    raise MissingServer("PostgreSQL server binaries (initdb, pg_ctl) not found: install Debian's postgresql "
                        "package (apt-get install postgresql; .ci/run does)")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _server_user() -> str | None:
    """The user to run the server as: None (ourselves) unless we are root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", FALLBACK_USER):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            pass
    subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", FALLBACK_USER],
                   check=True, capture_output=True)
    return FALLBACK_USER


class PgServer:
    def __init__(self):
        self.bin = server_binaries()
        self.user = _server_user()
        self.password = "pw-" + secrets.token_hex(12)  # distinctive, so a leak is found by search
        self.port = _free_port()
        self.root = Path(tempfile.mkdtemp(prefix="mmtune-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self._databases = 0

    def _run(self, *command: str, check: bool = True) -> subprocess.CompletedProcess:
        prefix = ["runuser", "-u", self.user, "--"] if self.user else []
        result = subprocess.run([*prefix, *command], capture_output=True, text=True, timeout=120)
        if check and result.returncode != 0:
            log = self.log.read_text()[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{command[0]} failed ({result.returncode}): {result.stderr[-2000:]}\n{log}")
        return result

    def start(self) -> "PgServer":
        pwfile = self.root / "pwfile"
        pwfile.write_text(self.password + "\n")
        if self.user:
            entry = pwd.getpwnam(self.user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
            os.chown(pwfile, entry.pw_uid, entry.pw_gid)
        pwfile.chmod(0o600)
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", SUPERUSER, f"--pwfile={pwfile}",
                  "--auth=scram-sha-256", "--encoding=UTF8", "--locale=C", "--no-sync")
        pwfile.unlink()
        self._start_server()
        return self

    def _start_server(self) -> None:
        options = (f"-c listen_addresses=127.0.0.1 -p {self.port} -c unix_socket_directories={self.root} "
                   "-c fsync=off -c synchronous_commit=off -c full_page_writes=off")
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start")

    def halt(self) -> None:
        """Stop the server as an administrator would (its clients' connections are cut)."""
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def resume(self) -> None:
        self._start_server()

    def stop(self) -> None:
        if self.data.exists():
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop", check=False)
        shutil.rmtree(self.root, ignore_errors=True)

    def url(self, database: str = "postgres", password: bool = True, host: str = "127.0.0.1") -> str:
        secret = f":{self.password}" if password else ""
        return f"postgresql://{SUPERUSER}{secret}@{host}:{self.port}/{database}"

    def connect(self, database: str = "postgres"):
        import psycopg

        return psycopg.connect(host="127.0.0.1", port=self.port, user=SUPERUSER, password=self.password,
                               dbname=database, autocommit=True, connect_timeout=10)

    def new_database(self) -> str:
        """A fresh, empty database; returns its name."""
        self._databases += 1
        name = f"fleet{self._databases}"
        with self.connect() as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return name
