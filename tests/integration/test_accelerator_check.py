"""The accelerator check at tiny shapes on the CPU: one JSON line, the kernels agreeing, and
what a CPU cannot check reported as skipped with the reason."""

import json

import pytest

from experiments.benchmarks import accelerator_check


def _assert_kernels_agree_on_cpu(kernels):
    # float32 blockwise is the dense kernel up to rounding; bfloat16 within a percent or so.
    assert kernels["blockwise_float32"]["status"] == "passed"
    assert kernels["blockwise_float32"]["output_error"] < 1e-5
    for kernel in ("dense", "blockwise"):
        result = kernels[f"{kernel}_bfloat16"]
        assert result["status"] == "passed"
        assert 0 < result["output_error"] <= 0.02 and 0 < result["gradient_error"] <= 0.05
    assert kernels["cudnn_bfloat16"] == {
        "status": "skipped",
        "reason": "cuDNN fused attention needs an NVIDIA GPU; this device is cpu"}


def test_kernels_agree_and_cudnn_is_skipped_on_cpu():
    _assert_kernels_agree_on_cpu(accelerator_check.kernels(tiny=True))


def test_the_approximate_kernels_agree_with_what_they_claim_to_compute():
    results = accelerator_check.approximate_kernels(tiny=True)
    for kernel in ("linear", "local", "local_global", "performer"):
        assert results[kernel]["status"] == "passed", results[kernel]
        assert results[kernel]["output_error"] < 1e-5
        assert results[kernel]["gradient_error"] < 1e-5
    assert not {"dense", "blockwise", "cudnn"} & set(results)  # the exact ones are checked


# About 65 CPU-seconds: a dozen compilations (three train steps, a 10-step run, two searches,
# five kernels) however tiny the shapes; 140 s on a busy 2-core CPU.
@pytest.mark.slow
def test_tiny_check_on_cpu_ends_with_one_json_line(builtin_data_dir, capsys):
    summary = accelerator_check.main(["--tiny", f"--data_dir={builtin_data_dir}"])
    out = capsys.readouterr().out.strip().splitlines()
    assert json.loads(out[-1]) == json.loads(json.dumps(summary))
    assert summary["ok"] and summary["failed"] == []

    devices = summary["devices"]
    assert devices["platform"] == "cpu" and devices["count"] >= 1 and devices["kinds"]

    for key in ("base_float32", "base_bfloat16", "big_bfloat16"):
        figures = summary["train_throughput"][key]
        assert figures["status"] == "measured"
        assert figures["tokens_per_s"] > 0 and 0 < figures["mfu"] < 1
        assert figures["tokens_per_step"] == 64 and figures["devices"] == 1

    kernels = summary["attention_kernels"]
    assert kernels["tolerances"] == {"bfloat16_output": 0.02, "bfloat16_gradients": 0.05,
                                     "float32": 1e-4}
    _assert_kernels_agree_on_cpu(kernels)
    approximate = summary["approximate_kernels"]
    assert {name: entry["status"] for name, entry in approximate.items()
            if isinstance(entry, dict)} == dict.fromkeys(
        ("linear", "local", "local_global", "performer"), "passed")

    decoding = summary["decode_speed"]
    assert decoding["status"] == "measured" and decoding["output_tokens"] == 15
    assert decoding["greedy_tokens_per_s"] > 0 and decoding["beam4_tokens_per_s"] > 0

    training = summary["training"]
    assert training["status"] == "measured" and training["steps"] == 10  # no goal with --tiny
    assert 0.0 <= training["test_bleu"] <= 100.0 and training["bleu_sentences"] == 4
    # The planner's comparison needs a real NVIDIA GPU; on a CPU it says so.
    assert summary["planner"]["status"] == "skipped"
    assert "NVIDIA GPU" in summary["planner"]["reason"]


def test_a_failed_entry_anywhere_fails_the_check():
    summary = {"a": {"status": "passed"}, "b": {"x": {"status": "failed"},
                                                "y": {"status": "skipped", "reason": "r"}}}
    assert accelerator_check.failed(summary) == ["b.x"]
