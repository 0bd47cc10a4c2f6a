"""A point's sweep_point.json: its head rewritten, its attempts appended."""

import json

from transformer_jax.sweeps import records


def test_record_attempt_appends(tmp_path):
    records.record_attempt(tmp_path / "p", {"sweep": "s", "point": "p", "launcher": "slurm"},
                           {"returncode": 1})
    records.record_attempt(tmp_path / "p", {"sweep": "s", "point": "p", "launcher": "local"},
                           {"returncode": 0})
    record = json.loads((tmp_path / "p" / "sweep_point.json").read_text())
    assert record["point"] == "p" and [a["returncode"] for a in record["attempts"]] == [1, 0]
    assert record["launcher"] == "local"  # the one that started the last attempt
    assert records.read_point(tmp_path / "p") == record
    assert records.read_point(tmp_path / "missing") == {}
