"""Downloads verify TLS certificates: a dataset prepared here (``sources.prepare_generated``,
what ``prepare`` runs, with its download config) from an HTTPS server whose certificate no
trusted authority signed is refused before a byte is fetched, and fetched once the server's
certificate authority is named in REQUESTS_CA_BUNDLE, as behind a mirror or proxy of one's
own."""

import contextlib
import datetime
import http.server
import ipaddress
import ssl
import threading

import pytest
import requests
import tensorflow_datasets as tfds
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from tensorflow_datasets.core.download import downloader

from transformer_jax.data import sources

PAIRS = [("The house.", "Das Haus."), ("The tree.", "Der Baum.")]


class TlsProbe(tfds.core.GeneratorBasedBuilder):
    """A dataset of pairs downloaded from ``URL`` (a TSV file), as TFDS's WMT builder
    downloads statmt's archives."""

    VERSION = tfds.core.Version("1.0.0")
    URL = ""

    def _info(self):
        return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict(
            {"en": tfds.features.Text(), "de": tfds.features.Text()}))

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(dl_manager.download(self.URL))}

    def _generate_examples(self, path):
        for i, line in enumerate(path.read_text().splitlines()):
            en, de = line.split("\t")
            yield i, {"en": en, "de": de}


def _name(common_name):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def certificates(directory):
    """A certificate authority of its own (ca.pem) and a certificate it signs for
    127.0.0.1 (server.pem, server.key)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name("test CA")).issuer_name(_name("test CA"))
          .public_key(ca_key.public_key()).serial_number(1)
          .not_valid_before(now - datetime.timedelta(hours=1))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False,
                                       False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    server = (x509.CertificateBuilder().subject_name(_name("127.0.0.1")).issuer_name(ca.subject)
              .public_key(key.public_key()).serial_number(2)
              .not_valid_before(now - datetime.timedelta(hours=1))
              .not_valid_after(now + datetime.timedelta(days=1))
              .add_extension(x509.SubjectAlternativeName(
                  [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
              .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    (directory / "ca.pem").write_bytes(ca.public_bytes(pem))
    (directory / "server.pem").write_bytes(server.public_bytes(pem))
    (directory / "server.key").write_bytes(key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return directory / "ca.pem"


@contextlib.contextmanager
def https_server(directory, body):
    """Serves ``body`` at https://127.0.0.1:PORT/pairs.tsv; yields (URL, requests seen)."""
    seen = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            seen.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(directory / "server.pem", directory / "server.key")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}/pairs.tsv", seen
    finally:
        server.shutdown()
        server.server_close()


def test_prepare_verifies_the_certificates_of_what_it_downloads(tmp_path, monkeypatch):
    monkeypatch.setattr(downloader, "MAX_RETRIES", 1)
    for name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    ca = certificates(tmp_path)
    body = "".join(f"{en}\t{de}\n" for en, de in PAIRS).encode()
    with https_server(tmp_path, body) as (url, seen):
        monkeypatch.setattr(TlsProbe, "URL", url)
        # No trusted authority signed the server's certificate: refused, nothing fetched.
        with pytest.raises(Exception) as refused:  # noqa: PT011  TFDS wraps requests' error
            sources.prepare_generated("tls_probe", str(tmp_path / "untrusted"))
        chain, e = [], refused.value
        while e is not None:
            chain.append(e)
            e = e.__cause__ or e.__context__
        assert any(isinstance(x, requests.exceptions.SSLError) for x in chain)
        assert "CERTIFICATE_VERIFY_FAILED" in str(refused.value)
        assert seen == []
        # Its authority named in REQUESTS_CA_BUNDLE: fetched once and prepared.
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(ca))
        sources.prepare_generated("tls_probe", str(tmp_path / "trusted"))
        assert seen == ["/pairs.tsv"]
    records = tfds.data_source("tls_probe", split="train", data_dir=str(tmp_path / "trusted"),
                               download=False)
    assert sorted((r["en"].decode(), r["de"].decode()) for r in records) == sorted(PAIRS)
    assert sources.download_config().verify_ssl
