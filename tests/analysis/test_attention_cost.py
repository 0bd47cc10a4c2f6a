"""The quadratic bill: attention-matrix memory of the base model at n = 512 .. 1,048,576,
the dense kernel's measured peak growing as n², and the benchmark's result file read back."""

import json

import pytest

from transformer_jax.analysis import attention_cost
from transformer_jax.errors import UserError


def test_quadratic_bill_of_the_base_model():
    bill = attention_cost.quadratic_bill()
    assert [r["n"] for r in bill] == [512 * 2 ** i for i in range(12)]
    assert bill[-1]["n"] == 1_048_576
    first, last = bill[0], bill[-1]
    assert first["cells"] == 262_144 and first["head_bytes"] == 524_288  # 512 KiB
    assert first["matrices"] == 96 and first["model_bytes"] == 96 * 524_288  # 48 MiB
    assert first["layer_bytes"] == 8 * 524_288
    assert last["head_bytes"] == 2 * 2 ** 40 and last["model_bytes"] == 192 * 2 ** 40
    measured = {"heads": 8, "source": "a file", "machine": "m",
                "results": [{"kind": "dense", "n": 1024, "pass": "forward",
                             "peak_bytes": 3 * 2 ** 20, "error": None}]}
    table = attention_cost.bill_table(bill, measured)
    assert "| 512 | 262,144 | 512 KiB | 4 MiB | 48 MiB | - |" in table
    assert "| 1,024 | 1,048,576 | 2 MiB | 16 MiB | 192 MiB | 3 MiB |" in table
    assert "| 1,048,576 | 1,099,511,627,776 | 2 TiB | 16 TiB | 192 TiB | - |" in table


def test_measured_memory_of_the_dense_kernel_grows_as_n_squared():
    measured = attention_cost.measure_dense_attention([512, 1024], heads=8, d_k=64)
    peak = {r["n"]: r["peak_bytes"] for r in measured["results"]}
    for n in (512, 1024):
        # At least q, k, v, the output and the n x n float32 mask bias. (XLA's CPU backend
        # fuses the products and softmax of all 8 heads into one kernel, so the heads'
        # [8, n, n] weights need not exist whole; the bias, shared by the heads, does.)
        assert peak[n] >= 4 * 8 * n * 64 * 4 + n * n * 4
    assert 2.2 < peak[1024] / peak[512] <= 4.0  # faster than linear in n


def test_measured_memory_prefers_the_benchmark_file(tmp_path):
    path = tmp_path / "attention_scaling.json"
    path.write_text(json.dumps({
        "machine": "1x GPU", "date": "2026-12-01", "backend": "gpu", "heads": 8, "d_k": 64,
        "results": [{"kind": "dense", "n": 512, "pass": "forward", "time_s": 0.001,
                     "peak_bytes": 12345, "error": None},
                    # A fused kernel's scratch: the process grew more than XLA accounted for.
                    {"kind": "dense", "n": 1024, "pass": "forward", "time_s": 0.002,
                     "peak_bytes": 1000, "measured_bytes": 5000, "error": None},
                    {"kind": "dense", "n": 262144, "pass": "forward", "time_s": None,
                     "peak_bytes": None, "error": "out of memory"}]}))
    measured = attention_cost.measured_memory(path)
    assert measured["source"] == str(path) and measured["machine"] == "1x GPU"
    # The failed length is dropped; each peak is the larger of the two accounts.
    assert [(r["n"], r["peak_bytes"]) for r in measured["results"]] == [(512, 12345),
                                                                         (1024, 5000)]
    path.write_text("{")
    with pytest.raises(UserError, match=r"attention_scaling.json: cut short \(.*\); not an "
                                        "attention-scaling result file$"):
        attention_cost.measured_memory(path)
    path.write_text('{"results": []}')
    with pytest.raises(UserError, match="attention_scaling.json: machine='None' is not a "
                                        "string; not an attention-scaling result file$"):
        attention_cost.measured_memory(path)
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff")  # found: a UnicodeDecodeError
    with pytest.raises(UserError, match=r"attention_scaling.json: not UTF-8 \(byte 0x89 at "
                                        r"byte 1\)"):
        attention_cost.measured_memory(path)


def test_the_benchmark_file_is_found_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    measured = attention_cost.measured_memory()
    assert measured["source"] == str(attention_cost.MEASURED_FILE)
    assert attention_cost.MEASURED_FILE.parent == attention_cost.CHECKOUT / "experiments/results"
