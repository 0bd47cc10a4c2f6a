"""Every file of a workdir as the commands read it back, damaged or edited, but the
checkpoints' (test_checkpoint_files.py): config.json and config_changes.jsonl, metrics.jsonl,
final_metrics.json, hold.json, provenance.json, sweep_point.json, row_len.json. Accepted,
what is read is what the file holds, of the types the run writes (a config equal to the
file's values); refused, in one UserError naming the file, or by a reader that goes on
without what is damaged, left out with a warning naming it."""

import json
import math
import os
import shutil
import socket
import tempfile

import pytest
from hypothesis import example, given, strategies as st

from transformer_jax.config import resume
from transformer_jax.data import rows
from transformer_jax.io import holds, layout, metric_keys, provenance, storage, workdirs
from transformer_jax.sweeps import records, status
from transformer_jax.training import stops

from . import strategies as gen
from .fuzzing import accepted, copy, count, examples, judged, outcome, warnings_logged


@pytest.fixture(scope="module")
def light_workdir(trained_workdir, tmp_path_factory):
    """The trained workdir's files but its checkpoints and TensorBoard events, for the
    readers that do not restore a model (copied in a blink)."""
    out = tmp_path_factory.mktemp("light") / "run"
    shutil.copytree(trained_workdir, out, ignore=shutil.ignore_patterns(
        layout.CHECKPOINTS, layout.TENSORBOARD))
    return out


def _plain(value):
    return json.loads(json.dumps(value, default=str))


# What the named examples of config.json must give: True read, False refused.
CONFIG_EXPECTED = {"as written": True, "garbage": False, "model null": False, "deep": False,
                   "d_model text": False, "digits": False, "key twice": False,
                   "variant blank": False, "inexact float": False, "newline field": False}


@examples(30)
@given(st.data())
@example("as written")
@example("garbage")
@example("model null")  # found: a TypeError deep in validation
@example("deep")  # found: a RecursionError
@example("d_model text")
@example("newline field")
@example("digits")  # found: Python's int-conversion ValueError (4,300 digits at most)
@example("key twice")  # found: the first of two values dropped without a word
@example("variant blank")  # found: the base model read back labelled as no variant
@example("inexact float")  # found: an integer of 54 bits read back as another float
def test_config_json_reads_as_its_values_or_one_line(light_workdir, data):
    saved = json.loads((light_workdir / layout.CONFIG).read_text())
    if data == "model null":
        raw = json.dumps({**saved, "model": None}).encode()
    elif data == "digits":
        raw = json.dumps(saved).encode().replace(b'"seed": 0', b'"seed": ' + b"1" * 5000, 1)
        assert b"1" * 5000 in raw
    elif data == "key twice":
        raw = json.dumps(saved).encode().replace(b'"model": {', b'"model": {"d_model": 64, ', 1)
        assert raw.count(b'"d_model"') == 2
    elif data == "variant blank":
        raw = json.dumps({**saved, "variant": " "}).encode()
    elif data == "inexact float":
        raw = json.dumps({**saved, "optim": {**saved["optim"],
                                             "lr_scale": 9_007_199_254_740_993}}).encode()
    elif data == "deep":
        raw = b'{"model":' * 50_000 + b"1" + b"}" * 50_000
    elif data == "d_model text":
        raw = json.dumps({**saved, "model": {**saved["model"], "d_model": "512"}}).encode()
    elif data in ("newline field", "as written"):
        raw = (light_workdir / layout.CONFIG).read_bytes()
    elif data == "garbage":
        raw = b"\x00{garbage"
    else:
        raw = data.draw(gen.json_or_bytes(saved))
    with tempfile.TemporaryDirectory() as directory:
        workdir = copy(light_workdir, directory)
        (workdir / layout.CONFIG).write_bytes(raw)
        if data == "newline field":  # found: a message of two lines
            (workdir / layout.CONFIG_CHANGES).write_text(json.dumps({"changes": {"\n": None}}))
        elif not isinstance(data, str) and data.draw(st.booleans()):
            (workdir / layout.CONFIG_CHANGES).write_bytes(data.draw(st.one_of(
                st.binary(max_size=40), st.lists(gen.json_values(), max_size=3).map(
                    lambda xs: "\n".join(json.dumps({"changes": x}) for x in xs).encode()))))
        path = workdir / layout.CONFIG
        ok, config = outcome(lambda: resume.workdir_config(workdir),
                             names=[str(path), str(workdir / layout.CONFIG_CHANGES)],
                             expect=CONFIG_EXPECTED.get(data) if isinstance(data, str) else None)
        if not ok:
            return
        read = _plain(config.to_dict())
        values = workdirs.read_config(workdir)
        # Every field of the file this version has is read as the file gives it.
        same = all(_plain(v) == read[s][k] for s, fields in values.items()
                   if isinstance(fields, dict) and s in read for k, v in fields.items()
                   if k in read[s])
        accepted(same and config.variant.strip() and (data != "as written" or read == _plain(
            saved)), "a field of config.json read as another value (or a variant of no name)")


NUMBERS = st.one_of(st.integers(-(2**63), 2**63), st.floats(allow_nan=True, allow_infinity=True))
NOT_NUMBERS = st.one_of(st.text(max_size=3), st.booleans(), st.none(),
                        st.lists(st.integers(), max_size=2), st.just({"a": 1}))


@st.composite
def metric_line(draw):
    """(a line of metrics.jsonl, the record the reader must give or None, what its warning
    must say or None for no warning), worked out from how the line was made."""
    kind = draw(st.sampled_from(["record", "record", "not numbers", "step", "split", "cut short",
                                 "not an object", "binary", "key twice", "digits", "deep"]))
    record = {"split": draw(st.one_of(st.sampled_from(["train", "eval"]),
                                      st.text(min_size=1, max_size=4))),
              "step": draw(st.integers(0, 10**20)),
              **draw(st.dictionaries(st.sampled_from(["loss", "perplexity", "learning_rate"]),
                                     NUMBERS, max_size=3))}
    text = json.dumps(record)
    if kind == "record":
        return text.encode(), record, None
    if kind == "not numbers":
        bad = draw(st.dictionaries(st.sampled_from(["loss", "accuracy"]), NOT_NUMBERS,
                                   min_size=1, max_size=2))
        return json.dumps({**record, **bad}).encode(), {
            k: v for k, v in record.items() if k not in bad}, "left out"
    if kind in ("step", "split"):
        value = draw(st.one_of(st.integers(max_value=-1), st.floats(), st.just("5"), st.just(""),
                               NOT_NUMBERS) if kind == "step" else st.one_of(
            st.integers(), st.just(""), NOT_NUMBERS.filter(lambda v: not isinstance(v, str))))
        line = {**record, kind: value} if draw(st.booleans()) else {
            k: v for k, v in record.items() if k != kind}  # or no such key at all
        return json.dumps(line).encode(), None, f"{kind}="
    if kind == "cut short":  # what a run killed while writing leaves
        return text[:draw(st.integers(1, len(text) - 1))].encode(), None, "cut short"
    if kind == "not an object":
        value = draw(gen.json_values().filter(lambda v: not isinstance(v, dict)))
        return json.dumps(value).encode(), None, "not an object"
    if kind == "binary":
        raw = draw(st.binary(min_size=1, max_size=30).filter(
            lambda b: b"\n" not in b and b.strip() and not b.strip().startswith(b"{")))
        return raw, None, ""
    if kind == "key twice":
        return text[:-1].encode() + b', "step": 3}', None, "given twice"
    if kind == "digits":
        return b'{"split": "train", "step": ' + b"9" * 5000 + b"}", None, "5,000 digits"
    return b"[" * 5000 + b"]" * 5000, None, "nested too deep"


@examples(40)
@given(st.lists(metric_line(), max_size=8), st.sampled_from([b"\n", b""]))
@example([(b'{"split": "train", "step": 1, "loss": 2.5}', {"split": "train", "step": 1,
                                                          "loss": 2.5}, None),
          (b'{"split": "eval", "step": 1, "perplexity": 12.0}', {
              "split": "eval", "step": 1, "perplexity": 12.0}, None)], b"\n")  # all valid
@example([(b'{"split": "train", "step": 1e400}', None, "step="),
          (b'{"split": "train", "step": 5, "loss": NaN}', {"split": "train", "step": 5,
                                                           "loss": math.nan}, None)], b"\n")
@example([(b"\xff\xfe\x00", None, "not UTF-8")], b"")  # found: a UnicodeDecodeError
# found: read as if valid, or dropped without a word
@example([(b'{"split": "train", "step": -3, "loss": 1.0}', None, "step=-3"),
          (b'{"split": "train", "step": "7", "loss": 1.0}', None, "step='7'"),
          (b'{"split": "eval", "step": 10, "loss": 2.5}', {"split": "eval", "step": 10,
                                                           "loss": 2.5}, None),
          (b'{"split": "train", "st', None, "cut short")], b"")
@example([(b'{"split": "eval", "step": 10, "loss": 2.5}', {"split": "eval", "step": 10,
                                                           "loss": 2.5}, None),
          (b"\x89PNG\r\x1a\x00\xff", None, "not UTF-8"),
          (b'{"split": "eval", "step": 20, "loss": 2.0}', {"split": "eval", "step": 20,
                                                           "loss": 2.0}, None)], b"\n")
def test_metrics_jsonl_is_judged_line_by_line(light_workdir, lines, end):
    """Every record training writes is read, in order; every other line is left out with a
    warning naming the file and the line (one cut short says so: a run killed while writing
    it, normal after a preemption), and a value that is not a number is left out of its
    record, named likewise. No line is dropped without a word, none crashes the readers, and
    the file is never refused whole: each line left out counts apart in the tally."""
    with tempfile.TemporaryDirectory() as directory:
        workdir = copy(light_workdir, directory)
        (workdir / layout.METRICS).write_bytes(b"\n".join(raw for raw, _, _ in lines) + end)
        path = str(workdir / layout.METRICS)
        with warnings_logged() as said:
            _, result = outcome(lambda: (workdirs.read_metric_records(workdir),
                                         workdirs.last_logged_step(workdir),
                                         status.point_progress(workdir, 30, ask_queue=False)),
                                names=[path], expect=True)
        records, last, progress = result
        wanted = [r for _, r, _ in lines if r is not None]
        warned = [" ".join(w for w in said if f"{path} line {n}:" in w)
                  for n in range(1, len(lines) + 1)]
        named = all((why is None) == (not warned[i]) and (why or "") in warned[i]
                    for i, (_, _, why) in enumerate(lines))
        accepted(json.dumps(records) == json.dumps(wanted) and named
                 and last == max((r["step"] for r in wanted), default=None)
                 and isinstance(progress["state"], str),
                 f"read {records}, warned {warned}")
        for _, _, why in lines:
            if why is not None:  # a line left out (or a value of it), named in its warning
                count("left out")


@examples(40)
@given(st.data())
@example("as written")
@example({"step": "30", "stopped": {"reason": "pruned", "step": "x"}})  # found: int("x")
@example({"test_hypotheses": "../../../etc/passwd", "test_references": "/etc/passwd",
          "step": 30})
@example(b'{"step": 30, "step": 10}')  # the step read as 10 without a word
@example(b'{"step": ' + b"3" * 5000 + b"}")
@example(b'{"step": 30, "perplexity": NaN}')  # a diverged run's figure: kept
def test_final_metrics_json_is_read_with_its_types(light_workdir, data):
    final = json.loads((light_workdir / layout.FINAL_METRICS).read_text())
    expect = {"as written": True, str({"step": "30", "stopped": {
        "reason": "pruned", "step": "x"}}): False}.get(str(data))
    raw = (light_workdir / layout.FINAL_METRICS).read_bytes() if data == "as written" else \
        data if isinstance(data, bytes) else json.dumps(data).encode() if isinstance(
        data, dict) else data.draw(st.one_of(
        gen.json_or_bytes({**final, "stopped": {"reason": "pruned", "step": 10, "message": "m"}}),
        gen.damaged_bytes(json.dumps(final).encode())))
    with tempfile.TemporaryDirectory() as directory:
        workdir = copy(light_workdir, directory)
        (workdir / layout.FINAL_METRICS).write_bytes(raw)
        path = str(workdir / layout.FINAL_METRICS)
        with warnings_logged() as said:
            _, result = outcome(lambda: (workdirs.read_final(workdir), stops.stopped(workdir),
                                         status.point_status(workdir, 30)),
                                names=[path], expect=True)  # a damaged file: left out
        read, stop, point = result
        step = read.get(metric_keys.STEP)
        files = [read.get(k) for k in (metric_keys.TEST_HYPOTHESES, metric_keys.TEST_REFERENCES)]
        judged(said, [path], (step is None or (isinstance(step, int) and step >= 0))
               and all(f is None or (not f.startswith("/") and ".." not in f.split("/"))
                       for f in files)
               and (point.kind == "finished") == (step == 30)
               and (data != "as written" or read == final),
               f"read {read}, status {point}", expect=expect)


HOLDS = st.fixed_dictionaries({}, optional={
    "host": st.one_of(st.just(socket.gethostname()), st.text(max_size=5), gen.ANY_SCALAR),
    "pid": st.one_of(st.sampled_from([os.getpid(), 1, 0, -1, 2**22, 2**31, 2**63, 2**64,
                                      10**30]), gen.ANY_SCALAR),
    "since": st.one_of(st.just("2026-12-01T05:00:00+00:00"), gen.ANY_SCALAR),
    "heartbeat": st.one_of(st.just("2026-12-01T05:00:00+00:00"), st.just("9999-12-31T00:00"),
                           gen.ANY_SCALAR)})


LIVE_HOLD = json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                        "since": "2026-12-01T05:00:00+00:00",
                        "heartbeat": "9999-12-31T00:00"}).encode()  # this process's


@examples(40)
@given(st.one_of(HOLDS.map(lambda h: json.dumps(h).encode()), st.binary(max_size=20)))
@example(b"")  # damaged: taken over
@example(LIVE_HOLD)  # live: refused
@example(json.dumps({"host": socket.gethostname(), "pid": 2**64, "since": "s",
                     "heartbeat": "h"}).encode())  # found: an OverflowError from os.kill
def test_a_hold_file_is_live_stale_or_damaged_never_a_crash(light_workdir, raw):
    with tempfile.TemporaryDirectory() as directory:
        workdir = copy(light_workdir, directory)
        (workdir / layout.HOLD).write_bytes(raw)

        def take():
            with holds.Hold(workdir, heartbeat_s=3600):
                return holds.read_hold(workdir)

        ok, mine = outcome(take, names=[str(workdir)],
                           expect={b"": True, LIVE_HOLD: False}.get(raw))
        if ok:
            accepted(mine is not None and mine["pid"] == os.getpid()
                     and not (workdir / layout.HOLD).exists(), f"held by {mine}")
        else:  # refused: the hold it found is live (this process)
            hold = holds.read_hold(workdir)
            assert hold is not None and holds.hold_is_live(hold)


@examples(30)
@given(st.one_of(gen.json_values().map(lambda v: json.dumps({"runs": v}).encode()),
                 gen.json_values().map(lambda v: json.dumps(v).encode()),
                 st.binary(max_size=30)))
@example(b"as written")
@example(json.dumps({"runs": [{"commit": 5, "versions": []}]}).encode())  # found
def test_provenance_json_gives_fingerprints(light_workdir, raw):
    """Read whole, the entries are the file's; an entry not of the form a run writes is
    left out with a warning naming the file."""
    written = (light_workdir / layout.PROVENANCE).read_bytes()
    expect = {b"as written": True, json.dumps({"runs": [{"commit": 5, "versions": []}]}
                                              ).encode(): False}.get(raw)
    raw = written if raw == b"as written" else raw
    with tempfile.TemporaryDirectory() as directory:
        workdir = copy(light_workdir, directory)
        (workdir / layout.PROVENANCE).write_bytes(raw)
        path = str(workdir / layout.PROVENANCE)
        with warnings_logged() as said:
            _, (runs, prints) = outcome(lambda: (provenance.read(workdir), [
                provenance.fingerprint(r) for r in provenance.read(workdir)]), names=[path],
                expect=True)
        judged(said, [path], all(isinstance(p["code"], str) for p in prints)
               and (raw != written or runs == json.loads(written)["runs"]),
               f"read {runs}", expect=expect)


VALID_POINT = json.dumps({"sweep": "s", "attempts": [{"wall_s": 1.5, "cpu_s": 2.0}]}).encode()


@examples(30)
@given(st.one_of(gen.json_values().map(lambda v: json.dumps({"attempts": v}).encode()),
                 gen.json_values().map(lambda v: json.dumps(v).encode()),
                 st.binary(max_size=30)))
@example(VALID_POINT)
@example(json.dumps({"attempts": [{"wall_s": "1"}, 3]}).encode())  # found: a TypeError
@example(b'{"attempts": null}')  # found: a TypeError
def test_sweep_point_json_reads_as_attempts(light_workdir, raw):
    """Read whole, the attempts are the file's; an attempt that is not an object, or a time
    that is not a number, is left out with a warning naming the file."""
    expect = {VALID_POINT: True, json.dumps({"attempts": [{"wall_s": "1"}, 3]}).encode(): False
              }.get(raw)
    with tempfile.TemporaryDirectory() as directory:
        workdir = copy(light_workdir, directory)
        (workdir / layout.SWEEP_POINT).write_bytes(raw)
        path = str(workdir / layout.SWEEP_POINT)
        with warnings_logged() as said:
            _, (record, progress) = outcome(lambda: (
                records.read_point(workdir), status.point_progress(workdir, 30, ask_queue=False)),
                names=[path], expect=True)
        judged(said, [path], all(isinstance(a, dict) and all(
            isinstance(a[k], int | float) for k in ("wall_s", "cpu_s") if k in a)
            for a in record.get("attempts", []))
            and isinstance(progress["wall_s"], int | float)
            and (raw != VALID_POINT or record == json.loads(VALID_POINT)), f"read {record}",
            expect=expect)
        records.record_point(workdir, {"sweep": "s"}, {"wall_s": 1.0})  # writes it whole
        assert records.read_point(workdir)["attempts"][-1] == {"wall_s": 1.0}


@examples(30)
@given(st.one_of(gen.json_values().map(lambda v: json.dumps({"row_len": v}).encode()),
                 gen.json_values().map(lambda v: json.dumps(v).encode()),
                 st.integers(-3, 40).map(lambda n: json.dumps({"row_len": n}).encode()),
                 st.binary(max_size=30)))
@example(b'{"row_len": 16}')  # valid
@example(b'{"row_len": 0}')
@example(b'{"row_len": ' + b"9" * 5000 + b"}")
@example(b'{"row_len": 16, "row_len": 99}')
def test_row_len_json_gives_a_row_length_or_one_line(raw):
    with tempfile.TemporaryDirectory() as directory:
        path = storage.path(directory) / layout.ROW_LEN
        path.write_bytes(raw)
        ok, row_len = outcome(lambda: rows._recorded_row_len(path, 32), names=[str(path)],
                              expect={b'{"row_len": 16}': True, b'{"row_len": 0}': False,
                                      b'{"row_len": 16, "row_len": 99}': False}.get(raw))
        if ok:
            accepted(type(row_len) is int and 1 <= row_len <= 32
                     and json.loads(raw) == {"row_len": row_len}, f"read {row_len}")
