"""Every path the project reads or writes: local, or in a Google Cloud Storage bucket.

Workdirs, sweep roots, data directories and text files are ``etils.epath.Path`` objects,
made by :func:`path`. epath is the path type of the JAX ecosystem: orbax takes it for
checkpoint directories and TFDS for data directories, so one path object goes from the
command line to every library that touches storage, and local paths behave as ``pathlib``
paths do. A ``gs://`` path goes through fsspec's gcsfs; orbax writes checkpoint arrays
straight to the bucket with TensorStore, and grain's array_record reader opens ``gs://``
files itself. (``s3://`` is refused: orbax checkpoints only to local paths and ``gs://``.)

What a bucket changes, and how each guarantee is kept:

* Atomic writes. A local file is written to a temporary name and renamed over the target
  (:func:`write_atomically`). An object store has no rename (a "rename" copies then
  deletes), but a single object upload is atomic: readers see the old object or the new one,
  never half of either. So in a bucket the object is written directly, once, whole.
* Appended logs (``metrics.jsonl``, ``config_changes.jsonl``, ``train.log``, TensorBoard
  events). Objects cannot be appended to: :class:`LineLog` keeps the content in memory and
  rewrites the whole object when it is flushed (at most every ``REMOTE_FLUSH_S`` seconds,
  and whenever a checkpoint is saved, and on close). A run killed in between loses the lines
  since the last flush, which are those of steps after its last checkpoint: resuming from
  that checkpoint logs them again.
* Free space. Buckets have no free-space figure: :func:`free_bytes` returns None there and
  the workdir check tests only that the workdir can be written.
* Checkpoints. Locally orbax writes ``<step>.orbax-checkpoint-tmp-*`` and renames it; in a
  bucket it writes ``<step>/`` in place and marks it finished with ``commit_success.txt``.
  Either way an unfinished checkpoint is not listed, and a run resumes from the last
  finished one. Setting a damaged checkpoint aside, and retiring old ones, are renames,
  which in a bucket copy then delete object by object: a kill in the middle can leave a
  checkpoint partly in both places, and the next run finds it damaged and sets it aside
  again.
* Locks. The workdir hold (``hold.json``) works by heartbeat, as on a shared file system.
  The lock that lets one process write what many read (a token cache, a dataset prepared
  here) is an object created only if absent, kept alive by heartbeat (``locks.py``).

:func:`check` turns what a bucket can say (no such bucket, no credentials, no permission)
into one line naming the path, before training starts.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pathlib
import stat
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import IO, Any

import fsspec
from etils import epath

from transformer_jax.errors import DiskFull, UserError, shown
from transformer_jax.io import bucket_retries

REMOTE_SCHEMES = ("gs://",)
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)  # a full disk, an exhausted quota
REMOTE_FLUSH_S = 30.0  # how often a bucket log is rewritten (and always on close)

Path = epath.Path
PathLike = str | os.PathLike

# gcsfs caches directory listings for as long as the process lives: a checkpoint that orbax
# (through TensorStore) or another process wrote would stay invisible. A user's own setting
# (the FSSPEC_GCS environment variable) wins.
fsspec.config.conf.setdefault("gcs", {}).setdefault("use_listings_cache", False)
# A request that fails for a while is retried by the client; each retry is counted and
# reported (bucket_retries.py).
bucket_retries.watch()


def is_remote(p: PathLike) -> bool:
    """Whether ``p`` names an object in a bucket (``gs://``)."""
    return os.fspath(p).startswith(REMOTE_SCHEMES)


def path(p: PathLike) -> epath.Path:
    """``p`` as an epath path: a bucket path as it is, a local one with ``~`` expanded and
    made absolute (so that orbax, TFDS and subprocesses agree on it).

    Raises UserError for another scheme (``s3://``...): orbax writes checkpoints only to
    local paths and ``gs://``; and for a NUL byte, which no file system takes in a name.
    """
    text = os.fspath(p)
    if "\0" in text:
        raise UserError(f"{shown(text)}: a path cannot hold a NUL byte")
    if is_remote(text):
        return epath.Path(text)
    if "://" in text:
        raise UserError(f"{text}: only local paths and gs:// buckets are supported")
    return epath.Path(os.path.abspath(os.path.expanduser(text)))


def local(p: PathLike) -> pathlib.Path | None:
    """The local file-system path of ``p``, or None for a bucket path."""
    return None if is_remote(p) else pathlib.Path(os.fspath(path(p)))


def not_a_file(p: PathLike) -> str:
    """Why ``p`` cannot be read as a file: "" for a regular file (or an object in a bucket),
    else "no such file", "a directory", "a named pipe", "a socket" or "a device". Reading a
    named pipe or a device would wait for a writer that may never come: the project's
    readers of data, vocabularies and workdir files ask this first."""
    if is_remote(p):
        return "" if path(p).is_file() else "no such file"
    try:
        mode = os.stat(os.fspath(path(p))).st_mode
    except FileNotFoundError:
        return "no such file"
    except (OSError, ValueError) as e:  # a name too long, a loop of links
        return f"not readable ({type(e).__name__}: {shown(str(e))})"
    if stat.S_ISREG(mode):
        return ""
    kinds = [(stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe"),
             (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device")]
    return next((what for test, what in kinds if test(mode)), "not a regular file")


def write_atomically(p: PathLike, data: bytes | str) -> None:
    """Writes ``p`` whole or not at all (text as UTF-8): a local file through a temporary
    file renamed over it, an object in a bucket by one upload (atomic there)."""
    target = path(p)
    data = data.encode("utf-8") if isinstance(data, str) else data
    if is_remote(target):
        target.write_bytes(data)
        return
    # A name of its own per writer: two processes writing the same file never share it.
    temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.partial")
    try:
        temporary.write_bytes(data)
        os.replace(temporary, target)
    except OSError as e:
        raise full_disk(e, target) or e from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temporary)


def write_figure(fig: Any, p: PathLike, dpi: int = 100) -> None:
    """Saves a matplotlib figure as a PNG at ``p``, whole or not at all."""
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    write_atomically(p, buffer.getvalue())


def write_csv(p: PathLike, fieldnames: Sequence[str], rows: Iterable[Mapping[str, Any]]
              ) -> None:
    """Writes ``rows`` as CSV with a header of ``fieldnames`` (other keys are left out),
    whole or not at all."""
    import csv
    import io

    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=list(fieldnames), extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    write_atomically(p, text.getvalue())


def full_disk(e: BaseException, where: PathLike) -> DiskFull | None:
    """DiskFull naming ``where`` when ``e`` is a write refused for want of space (or quota),
    else None."""
    if not isinstance(e, OSError) or e.errno not in NO_SPACE:
        return None
    return DiskFull(f"{where}: {e.strerror or 'no space left on device'}: the write was "
                    "undone, nothing half-written is left there")


# How libraries that write through their own code (safetensors' Rust, CTranslate2's C++)
# word a write refused for want of space: C's strerror, Rust's io::Error.
NO_SPACE_WORDS = ("No space left on device", "Disk quota exceeded", "os error 28",
                  "os error 122")


def out_of_space(e: BaseException) -> bool:
    """Whether ``e``, or an exception it came from, is a write refused for want of space:
    an OSError of ENOSPC or EDQUOT, or another library's error saying so."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in NO_SPACE:
            return True
        if any(words in str(e) for words in NO_SPACE_WORDS):
            return True
        e = e.__cause__ or e.__context__
    return False


def free_bytes(p: PathLike) -> int | None:
    """Free space on the file system of ``p`` (which must exist); None in a bucket."""
    where = local(p)
    if where is None:
        return None
    import shutil

    return shutil.disk_usage(where).free


def copy_tree(source: PathLike, target: PathLike) -> None:
    """Copies the files under the local directory ``source`` to ``target`` (a bucket or a
    local directory), ``dataset_info.json`` files last, so that a reader never takes a
    half-copied TFDS dataset for a prepared one."""
    source = pathlib.Path(os.fspath(source))
    files = sorted((p for p in source.rglob("*") if p.is_file()),
                   key=lambda p: p.name == "dataset_info.json")
    for f in files:
        destination = path(target) / os.fspath(f.relative_to(source))
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_bytes(f.read_bytes())


def upload(local_file: PathLike, target: PathLike) -> None:
    """Copies the local file ``local_file`` to the object ``target`` in a bucket, streamed
    (a file of gigabytes is never held in memory). One object upload is atomic: readers see
    the whole object or none."""
    import fsspec

    fs, where = fsspec.core.url_to_fs(os.fspath(path(target)))
    fs.put_file(os.fspath(local_file), where)


def download(source: PathLike, local_file: PathLike) -> None:
    """Copies the object ``source`` in a bucket to the local file ``local_file``, streamed."""
    import fsspec

    fs, where = fsspec.core.url_to_fs(os.fspath(path(source)))
    fs.get_file(where, os.fspath(local_file))


def size(p: PathLike) -> int:
    """The size in bytes of a file or object."""
    return int(path(p).stat().length) if is_remote(p) else os.path.getsize(p)


def rmtree(p: PathLike) -> None:
    """Removes a directory and everything under it; a missing one is fine."""
    target = path(p)
    with contextlib.suppress(FileNotFoundError):
        if target.exists():
            target.rmtree()


class LineLog:
    """A file that lines (or, with ``binary``, records) are appended to: ``metrics.jsonl``,
    ``train.log``, TensorBoard event files.

    Locally it is a file opened to append, unbuffered, each :meth:`write` written whole or
    not at all: a write refused for want of space is cut off the file again (DiskFull names
    it), so a full disk never leaves half a line or record. A text file's partial last line
    (a writer killed mid-write) is ended first so that it cannot swallow the next line. In
    a bucket the
    object's content is kept in memory and the whole object is rewritten by :meth:`flush`,
    at most every ``flush_s`` seconds unless ``force``, and by :meth:`close`.
    """

    def __init__(self, p: PathLike, binary: bool = False, flush_s: float = REMOTE_FLUSH_S):
        self.path = path(p)
        self.binary = binary
        self.flush_s = flush_s
        self._written = -float("inf")
        self._dirty = False
        self._file: IO[bytes] | None = None
        if is_remote(self.path):  # the object's content is kept, to be written back whole
            existing = self.path.read_bytes() if self.path.exists() else b""
            self._parts = [existing + self._line_end(existing[-1:])]
        else:  # only the last byte of a local file is read
            self._file = open(self.path, "ab+", buffering=0)  # noqa: SIM115 -- see close()
            self._size = os.fstat(self._file.fileno()).st_size
            if self._size:
                self._file.seek(-1, os.SEEK_END)
                self._append(self._line_end(self._file.read(1)))

    def _line_end(self, last_byte: bytes) -> bytes:
        """The newline that ends a text file's partial last line (``last_byte`` its last
        byte), or nothing."""
        return b"\n" if not self.binary and last_byte not in (b"", b"\n") else b""

    def write(self, data: str | bytes) -> None:
        data = data.encode("utf-8") if isinstance(data, str) else data
        if self._file is not None:
            self._append(data)
        else:
            self._parts.append(data)
            self._dirty = True

    def _append(self, data: bytes) -> None:
        """Appends ``data`` to the local file whole (a write may take part of it), or, if the
        file system refuses, cuts the file back to its size before and raises (DiskFull
        when for want of space)."""
        rest = memoryview(data)
        try:
            while rest:
                rest = rest[self._file.write(rest):]
        except OSError as e:
            with contextlib.suppress(OSError):
                os.ftruncate(self._file.fileno(), self._size)
            raise full_disk(e, self.path) or e from None
        self._size += len(data)

    def flush(self, force: bool = False) -> None:
        if self._file is not None:  # written through at each write
            return
        if self._dirty and (force or time.monotonic() - self._written >= self.flush_s):
            self.path.write_bytes(b"".join(self._parts))
            self._written, self._dirty = time.monotonic(), False

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        else:
            self.flush(force=True)

    def sync(self) -> None:
        """Has a local file's writes reach the disk (fsync); a bucket's at :meth:`close`."""
        if self._file is not None:
            os.fsync(self._file.fileno())

    def __enter__(self) -> LineLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def append_line(p: PathLike, line: str) -> None:
    """Appends one line to the text file ``p`` (in a bucket: rewrites the object)."""
    with LineLog(p) as log:
        log.write(line.rstrip("\n") + "\n")


def check(p: PathLike, what: str = "workdir") -> epath.Path:
    """``p`` as a path, after checking that it can be written: the directory is made (a
    bucket's is implied) and a probe file written and removed.

    Raises UserError in one line naming the path and the problem: a bucket that does not
    exist, missing credentials, no permission, a local directory that cannot be made. The
    storage client's own log lines are kept out of the way (bucket_retries.RetryCounter).
    """
    target = path(p)
    probe = target / f".write_test.{uuid.uuid4().hex[:8]}"
    try:
        target.mkdir(parents=True, exist_ok=True)
        probe.write_text("ok")
        probe.unlink()
    except Exception as e:  # noqa: BLE001 -- every storage library raises its own errors
        raise UserError(f"{what} {shown(os.fspath(target))} is not writable: "
                        f"{describe_error(e, target)}") from e
    return target


def check_file(p: PathLike, what: str) -> epath.Path:
    """``p`` as the path of a file to write, after checking that it can be: UserError in one
    line naming ``what`` (the flag) and the path when it is a directory or another kind of
    file than a regular one, or its directory does not exist or is not one."""
    target = path(p)
    why = not_a_file(target)
    if why not in ("", "no such file"):
        raise UserError(f"{what}={shown(os.fspath(p))}: {why}, not a file to write")
    if not is_remote(target) and not target.parent.is_dir():
        raise UserError(f"{what}={shown(os.fspath(p))}: no directory {target.parent}")
    return target


def describe_error(e: BaseException, where: PathLike | None = None) -> str:
    """A storage error in words, one line: which of the usual causes it is (no such bucket,
    no credentials, no permission, no network), then the library's own words."""
    text = " ".join(str(e).split()) or type(e).__name__
    lowered = text.lower()
    remote = where is not None and is_remote(where)
    if "nosuchbucket" in lowered.replace(" ", "") or "bucket does not exist" in lowered or (
            remote and isinstance(e, FileNotFoundError)):
        cause = "the bucket does not exist"
    elif any(s in lowered for s in ("credential", "unauthenticated", "401", "anonymous caller",
                                    "could not automatically determine", "invalid_grant")):
        cause = ("no credentials (`gcloud auth application-default login`, or "
                 "GOOGLE_APPLICATION_CREDENTIALS naming a service account key)")
    elif any(s in lowered for s in ("403", "forbidden", "permission", "access denied")) or \
            isinstance(e, PermissionError):
        cause = "no permission to write there"
    elif "cannot connect to host" in lowered or "name or service not known" in lowered:
        cause = "the storage service cannot be reached (network)"
    elif isinstance(e, FileNotFoundError):
        cause = "no such directory"
    else:
        cause = type(e).__name__
    return f"{cause} ({text[:200]})"


def human_bytes(n_bytes: float) -> str:
    """Binary units, one decimal where needed: 524288 -> "512 KiB", 4.4e9 -> "4.1 GiB"."""
    units = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
    power = 0
    while n_bytes >= 1024 and power < len(units) - 1:
        n_bytes, power = n_bytes / 1024, power + 1
    return f"{n_bytes:,.1f}".removesuffix(".0") + f" {units[power]}"
