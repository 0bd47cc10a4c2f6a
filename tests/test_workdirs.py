"""A workdir's state: finished, unfinished, failed, queued or missing, and its metrics."""

import json

from transformer_jax import workdirs


def test_read_metrics_keeps_the_last_line_of_a_step(tmp_path):
    (tmp_path / "metrics.jsonl").write_text("\n".join([
        json.dumps({"split": "train", "step": 50, "loss": 5.0, "tokens_per_s": 900.0}),
        json.dumps({"split": "eval", "step": 50, "loss": 4.0, "perplexity": 40.0}),
        json.dumps({"split": "train", "step": 50, "loss": 4.5, "tokens_per_s": 1000.0}),
        json.dumps({"split": "eval", "step": 50, "bleu": 12.5}),
        '{"split": "train", "st',  # cut short by a killed run
    ]) + "\n")
    metrics = workdirs.read_metrics(tmp_path)
    assert metrics["train"] == {50: {"split": "train", "step": 50, "loss": 4.5,
                                     "tokens_per_s": 1000.0}}
    assert metrics["eval"][50] == {"split": "eval", "step": 50, "loss": 4.0,
                                   "perplexity": 40.0, "bleu": 12.5}


def _write(path, value):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(value if isinstance(value, str) else json.dumps(value))


def test_status_of_a_workdir(tmp_path):
    run = tmp_path / "run"
    assert str(workdirs.point_status(run, 450)) == "missing"
    _write(run / "metrics.jsonl", json.dumps({"split": "train", "step": 150, "loss": 3.0}))
    assert str(workdirs.point_status(run, 450)) == "unfinished (step 150 of 450)"
    _write(run / "sweep_point.json", {"attempts": [{"returncode": 0}, {"returncode": -9}]})
    assert str(workdirs.point_status(run, 450)) == "failed (exit -9, at step 150 of 450)"
    _write(run / "sweep_point.json", {"attempts": [{"job_id": "77"}]})
    assert str(workdirs.point_status(run, 450, squeue=lambda job: job == "77")) == (
        "queued (SLURM job 77)")
    assert workdirs.point_status(run, 450, squeue=lambda job: False).kind == "unfinished"
    # Finished at the config's last step; a config asking for more makes it unfinished.
    _write(run / "final_metrics.json", {"step": 450, "perplexity": 1.3})
    assert workdirs.point_status(run, 450).kind == "finished"
    assert workdirs.point_status(run, 900).kind == "unfinished"


def test_record_attempt_appends(tmp_path):
    header = {"sweep": "s", "point": "p"}
    workdirs.record_attempt(tmp_path / "p", header, {"returncode": 1})
    workdirs.record_attempt(tmp_path / "p", header, {"returncode": 0})
    record = json.loads((tmp_path / "p" / "sweep_point.json").read_text())
    assert record["point"] == "p" and [a["returncode"] for a in record["attempts"]] == [1, 0]
    assert workdirs.machine().split("-core ")[0].isdigit()
