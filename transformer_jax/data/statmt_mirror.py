"""A local stand-in for statmt.org's WMT downloads: the archives TFDS's ``wmt`` builder fetches,
written in statmt's formats from sentence pairs you give, and an HTTP proxy that serves them
at the builder's own URLs.

Which archive holds which file comes from TFDS's ``translate/wmt.py`` (its ``DATASET_MAP`` of
sub-datasets: URL and path in the archive, per language), so the files land where the real
builder looks for them and are parsed by its real code: ``.tgz`` / ``.tar`` archives, parallel
plain-text files (one sentence a line), ``.gz`` files inside a tar (Gigaword FR-EN), and the
SGML of newstest2014 (``<seg id="N">...</seg>``). The preparation tests, the preparation
benchmark and the base-model rehearsal prepare WMT14 through it without a network::

    archives = statmt_mirror.write_archives(directory, ("de", "en"), {"europarl_v7": pairs, ...})
    with statmt_mirror.serve(archives, tfds.builder_cls("wmt14_translate")):
        prepare.prepare("wmt14_ende", data_dir)

While it serves, the builder checks the downloads against the checksums of these archives
(TFDS records those of statmt's real ones), so its checksum validation runs too.

Pairs are ``(source-language sentence, English sentence)``, as TFDS's sub-datasets are
``{src}-en``.
"""

from __future__ import annotations

import contextlib
import gzip
import http.server
import io
import os
import pathlib
import tarfile
import threading
from collections.abc import Iterator, Mapping, Sequence

from tensorflow_datasets.core.download import checksums
from tensorflow_datasets.translate import wmt

Pairs = Sequence[tuple[str, str]]


def _text_file(path: str, sentences: Sequence[str], lang: str, doc: str) -> bytes:
    """One side of a parallel file in its statmt format, chosen by its name as wmt.py does."""
    if path.endswith(".sgm"):
        lines = [f'<srcset setid="{doc}" srclang="any">',
                 f'<doc sysid="ref" docid="{doc}" genre="news" origlang="{lang}">', "<p>"]
        lines += [f'<seg id="{i}">{s}</seg>' for i, s in enumerate(sentences, 1)]
        lines += ["</p>", "</doc>", "</srcset>"]
        return ("\n".join(lines) + "\n").encode("utf-8")
    data = "".join(s + "\n" for s in sentences).encode("utf-8")
    return gzip.compress(data, compresslevel=1) if path.endswith(".gz") else data


def write_archives(directory: str | os.PathLike, language_pair: tuple[str, str],
                   subsets: Mapping[str, Pairs]) -> dict[str, pathlib.Path]:
    """Writes the archives holding ``subsets`` ({wmt.py sub-dataset name: pairs}) for
    ``language_pair`` (TFDS's config, e.g. ``("de", "en")``) under ``directory``.

    Returns {URL: archive file}. Sub-datasets that share an archive (newstest2013 and
    newstest2014 are both in ``dev.tgz``) share it here.
    """
    source, _ = language_pair
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    members: dict[str, dict[str, bytes]] = {}
    for name, pairs in subsets.items():
        ds = wmt.DATASET_MAP[name]
        urls, paths = ds.get_url(source), ds.get_path(source)
        if len(urls) != 1 or len(paths) != 2:
            raise ValueError(f"{name}: not one archive of two parallel files ({urls}, {paths})")
        sides = tuple(zip(*pairs, strict=True)) if pairs else ((), ())
        for path, lang, side in zip(paths, (source, "en"), sides, strict=True):
            members.setdefault(urls[0], {})[path] = _text_file(path, side, lang, name)
    archives = {}
    for url, files in members.items():
        archive = directory / url.rsplit("/", 1)[1]
        mode = "w:gz" if archive.name.endswith((".tgz", ".tar.gz")) else "w"
        with tarfile.open(archive, mode, compresslevel=1) if mode == "w:gz" else \
                tarfile.open(archive, mode) as tar:
            for path, data in files.items():
                info = tarfile.TarInfo(path)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        archives[url] = archive
    return archives


class Mirror:
    """The running proxy: ``failing`` URLs are answered 503 (as statmt.org does at times),
    ``requests`` counts what was asked for, by URL."""

    def __init__(self, archives: Mapping[str, pathlib.Path]):
        self.archives = dict(archives)
        self.failing: set[str] = set()
        self.requests: dict[str, int] = {}


def _handler(mirror: Mirror) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802  (the http.server name)
            url = self.path  # a proxy is asked for the whole URL
            mirror.requests[url] = mirror.requests.get(url, 0) + 1
            if url in mirror.failing or url not in mirror.archives:
                self.send_response(503 if url in mirror.failing else 404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            path = mirror.archives[url]
            self.send_response(200)
            self.send_header("Content-Length", str(path.stat().st_size))
            self.end_headers()
            with open(path, "rb") as f:
                while block := f.read(1 << 20):
                    self.wfile.write(block)

        def log_message(self, *args) -> None:
            pass

    return Handler


@contextlib.contextmanager
def serve(archives: Mapping[str, str | os.PathLike], builder_cls: type) -> Iterator[Mirror]:
    """Serves ``archives`` ({URL: file}) from a local HTTP proxy that this process's
    ``http://`` downloads go through (``HTTP_PROXY``) while the context is open, with the
    archives' sizes and checksums as those ``builder_cls`` (a TFDS builder class) expects."""
    archives = {url: pathlib.Path(path) for url, path in archives.items()}
    mirror = Mirror(archives)
    recorded = builder_cls.__dict__.get("url_infos")
    builder_cls.url_infos = {url: checksums.compute_url_info(path)
                             for url, path in archives.items()}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(mirror))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    names = ("HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy")
    saved = {name: os.environ.get(name) for name in names}
    proxy = f"http://127.0.0.1:{server.server_address[1]}"
    os.environ.update(HTTP_PROXY=proxy, http_proxy=proxy)
    for name in ("NO_PROXY", "no_proxy"):
        os.environ.pop(name, None)
    try:
        yield mirror
    finally:
        if recorded is None:
            del builder_cls.url_infos
        else:
            builder_cls.url_infos = recorded
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        server.shutdown()
        server.server_close()
