"""Where a point stands: finished, unfinished, failed, missing, or queued with the scheduler
of the launcher that submitted it (a fake squeue here)."""

import json

from transformer_jax.sweeps.status import point_progress, point_status

from ..integration.test_launch import fake_tools


def _write(path, value):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(value if isinstance(value, str) else json.dumps(value))


def test_status_of_a_point(tmp_path, monkeypatch):
    run = tmp_path / "run"
    assert str(point_status(run, 450)) == "missing"
    assert point_progress(run, 450)["state"] == "not started"
    _write(run / "metrics.jsonl", json.dumps({"split": "train", "step": 150, "loss": 3.0}))
    assert str(point_status(run, 450)) == "unfinished (step 150 of 450)"
    assert point_progress(run, 450)["state"] == "stopped"
    _write(run / "sweep_point.json", {"attempts": [{"returncode": 0}, {"returncode": -9}]})
    assert str(point_status(run, 450)) == "failed (exit -9, at step 150 of 450)"

    # Submitted to SLURM: job 77 is still pending, 78 has left the queue.
    env = fake_tools(tmp_path, squeue='[ "$3" = 77 ] && echo PENDING; true')
    monkeypatch.setenv("PATH", env["PATH"])
    _write(run / "sweep_point.json", {"launcher": "slurm", "attempts": [{"job_id": "77"}]})
    assert str(point_status(run, 450, ask_queue=True)) == "queued (SLURM job 77)"
    assert point_progress(run, 450)["state"] == "pending under SLURM (job 77)"
    assert point_status(run, 450).kind == "unfinished"  # the queue not asked
    _write(run / "sweep_point.json", {"launcher": "slurm", "attempts": [{"job_id": "78"}]})
    assert point_status(run, 450, ask_queue=True).kind == "unfinished"
    # A launcher without a scheduler, or one this installation lacks, has no queue to ask.
    for launcher in ("local", "gone"):
        _write(run / "sweep_point.json", {"launcher": launcher, "attempts": [{"job_id": "77"}]})
        assert point_status(run, 450, ask_queue=True).kind == "unfinished", launcher

    # Finished at the config's last step; a config asking for more makes it unfinished.
    _write(run / "final_metrics.json", {"step": 450, "perplexity": 1.3})
    assert point_status(run, 450).kind == "finished"
    assert point_status(run, 900).kind == "unfinished"
