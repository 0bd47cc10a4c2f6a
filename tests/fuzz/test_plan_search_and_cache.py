"""The entry points of the planner, the search and the token cache: ``--devices`` as the
planner reads it, a search's flags (``--search``, ``--trials``, ``--objective``, ``--prune``,
``--confirm``, ``--search_seed``) as the sweep reads them, a search's study journal damaged
or edited, and a token cache file of any bytes as a run finds it. Accepted, the result is
the one asked for (a target of the named accelerator and count that prints as it parses; a
sampler that draws a trial inside the space; a journal's studies as Optuna records them; the
ids sentencepiece gives); refused, one line naming the flag or file."""

import json
import math
import string

import optuna
import pytest
from hypothesis import example, given, strategies as st

from transformer_jax import config as config_lib, studies
from transformer_jax.data import corpus, token_cache, tokenizer as tokenizer_lib
from transformer_jax.io import metric_keys
from transformer_jax.planning import accelerators
from transformer_jax.studies import pruners
from transformer_jax.sweeps import space
from transformer_jax.sweeps.search import samplers
from transformer_jax.sweeps.search.spec import Search

from . import strategies as gen
from .fuzzing import accepted, examples, judged, outcome, warnings_logged

NAMES = sorted(accelerators.ACCELERATORS)
COUNTS = st.one_of(st.sampled_from(["0", "1", "3", "8", "9", "16", "256", "1024", "1025",
                                    "8193", "99999999999999999999", "٨", "-1", "", "x"]),
                   st.integers(0, 10**6).map(str))


@st.composite
def devices_texts(draw):
    """What a user types after --devices=: NAME:COUNT or NAME:HOSTSxCOUNT, nearly so, or
    anything."""
    name = draw(st.one_of(st.sampled_from(NAMES), st.sampled_from(["H100", " v5e", "tpu", ""])))
    hosts = draw(st.one_of(st.just(""), COUNTS.map(lambda c: c + "x")))
    shaped = f"{name}:{hosts}{draw(COUNTS)}"
    return draw(st.one_of(st.just(shaped), st.sampled_from(gen.WEIRD_TEXT),
                          st.text(string.printable, max_size=12)))


@example("h100:8")  # valid
@example("v5e:8")  # valid
@example("h100:0")
@example("h100:100000x8")  # a count that would be built as 800,000 devices, not refused
@example("h100:٨")
@example("\n")  # found: a refusal quoting the newline, two lines
@given(devices_texts())
@examples(40)
def test_devices(text):
    ok, target = outcome(lambda: accelerators.parse(text), names=["--devices"],
                         expect={"h100:8": True, "v5e:8": True, "h100:0": False,
                                 "h100:100000x8": False}.get(text))
    if not ok:
        return
    hosts = target.processes
    again = accelerators.parse(str(target))
    cuda = target.accelerator.platform == "cuda"
    accepted(again == target and target.accelerator.name in text.strip().lower()
             and 1 <= hosts <= accelerators.MAX_HOSTS and target.count % hosts == 0
             and (target.count // hosts <= accelerators.MAX_GPUS_PER_HOST if cuda
                  else hosts == 1 and target.count in accelerators.TPU_SHAPES),
             f"--devices={text!r} read as {target}")


DIMENSION = space.log("optim.lr_scale", 0.25, 4.0)
SEEDS = st.one_of(st.none(), st.sampled_from(gen.EDGE_INTS + [-5]), st.integers(-(2**40), 2**40))


@example(sampler="tpe", trials=3, objective="perplexity", prune="none", confirm=2,
         seed=7)  # valid
@example(sampler="tpe", trials=3, objective="perplexity", prune="none", confirm=2,
         seed=-5)  # a negative seed reached numpy's Sobol engine as a traceback
@example(sampler="auto", trials=1, objective="\n", prune="asha", confirm=0, seed=None)  # found
@example(sampler="\n", trials=1, objective="loss", prune="\n", confirm=0, seed=None)
@given(sampler=st.one_of(st.sampled_from(samplers.names()),
                         st.sampled_from(["", "nosuch", "__init__", "../tpe", "TPE"])),
       trials=st.one_of(st.integers(-3, 40), st.sampled_from(gen.EDGE_INTS)),
       objective=st.one_of(st.sampled_from(metric_keys.OBJECTIVES), st.text(max_size=6)),
       prune=st.one_of(st.sampled_from(pruners.names()), st.sampled_from(["", "nosuch", "."])),
       confirm=st.one_of(st.integers(-3, 5), st.sampled_from(gen.EDGE_INTS)), seed=SEEDS)
@examples(30)
def test_search_flags(sampler, trials, objective, prune, confirm, seed):
    how = Search(sampler, trials, "", objective, prune, confirm, seed)

    def draw_one():
        # What the controller does with the flags: check them, build the study's sampler
        # for the budget, and draw a trial from it.
        how.check()
        budget = samplers.Budget(min(how.trials, 50), (DIMENSION,),
                                 config_lib.SEED_MAX if how.seed is None else how.seed)
        study = optuna.create_study(sampler=samplers.build(how.sampler, budget),
                                    direction=how.direction)
        return study.ask().suggest_float("optim.lr_scale", 0.25, 4.0, log=True)

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    ok, value = outcome(draw_one, names=["--search", "--trials", "--objective", "search.prune",
                                         "--confirm", "--search_seed"],
                        expect={7: True, -5: False}.get(seed) if (
                            sampler, trials, objective) == ("tpe", 3, "perplexity") else None)
    if ok:
        accepted(how.trials >= 1 and how.confirm >= 0
                 and (seed is None or 0 <= seed <= config_lib.SEED_MAX)
                 and 0.25 <= value <= 4.0 and math.isfinite(value),
                 f"{how} drew {value}")


PAIRS = corpus.build_corpus(seed=0, sizes={"train": 60})["train"]


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
    return tokenizer_lib.load_or_train(
        tmp_path_factory.mktemp("vocab"), tokenizer_lib.sample_text(iter(PAIRS), 100_000),
        vocab_size=120)


@given(damage=st.one_of(st.binary(max_size=200), st.sampled_from([b"", b"\0" * 64])),
       cut=st.one_of(st.none(), st.integers(0, 4000)))
@example(damage=b"", cut=10**9)  # the file whole: read as it is
@example(damage=b"", cut=None)  # empty: written again
@examples(8)
def test_a_token_cache_of_any_bytes(tmp_path_factory, vocab, damage, cut):
    """A run finds a cache file of garbage, or cut short: it writes it again, saying so in
    a warning naming the file (a damaged cache is never read as ids), and reads the ids
    sentencepiece gives; a whole one is read as it is."""
    workdir = tmp_path_factory.mktemp("run")
    spec = token_cache.CacheSpec()
    path = token_cache.open_or_write(spec, workdir, "train", PAIRS, vocab).path
    with open(path, "rb") as f:
        whole = f.read()
    with open(path, "wb") as f:
        f.write(whole[:cut] if cut is not None else damage)
    with warnings_logged() as said:
        _, cached = outcome(lambda: token_cache.open_or_write(spec, workdir, "train", PAIRS,
                                                              vocab), names=[path], expect=True)
    inputs, targets = cached.read_ids(range(len(PAIRS)))
    judged(said, [str(path)], len(cached) == len(PAIRS)
           and inputs.tolist() == [vocab.encode(s) for s, _ in PAIRS]
           and targets.tolist() == [vocab.encode(t) for _, t in PAIRS],
           f"a damaged token cache at {path} read as other ids",
           expect={(b"", 10**9): True, (b"", None): False}.get((damage, cut)))


@pytest.fixture(scope="module")
def journal_lines(tmp_path_factory):
    """The lines of a study's journal as a search writes it: a study, two trials told."""
    path = str(tmp_path_factory.mktemp("study") / "study.journal")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name="lr", storage=studies.open_storage(path))
    for value in (3.0, 2.0):
        trial = study.ask()
        trial.suggest_float("optim.lr_scale", 0.25, 4.0, log=True)
        study.tell(trial, value)
    with open(path, "rb") as f:
        return f.read().splitlines(keepends=True)


# A journal's first lines: a study, and a trial of it started.
STUDY = b'{"op_code": 0, "worker_id": "w", "study_name": "lr", "directions": [1]}\n'
TRIAL = b'{"op_code": 4, "worker_id": "w", "study_id": 0, "datetime_start": "2026-12-06"}\n'


def told(values: bytes, trial: int = 0) -> bytes:
    """The journal's line of ``trial`` complete, told ``values``."""
    return (b'{"op_code": 6, "worker_id": "w", "trial_id": %d, "state": 1, "values": %s, '
            b'"datetime_complete": "2026-12-06"}\n' % (trial, values))


@example(b"garbage\n")  # found: a JSONDecodeError from Optuna's replay, as a traceback
@example(b'{"op_code": 99}\n')
@example(b'{"op_code": 0, "worker_id": "w", "study_name": null, "directions": [1]}\n')  # found
# found by the long run: a trial complete with no value beside one told 3.0 (Optuna's
# TypeError), with an empty list of values (IndexError), with values of a string (its
# RuntimeError of a study of several objectives)
@example(STUDY + TRIAL + told(b"[3.0]") + TRIAL + told(b"null", trial=1))
@example(STUDY + TRIAL + told(b"[]"))
@example(STUDY + TRIAL + told(b'"00"'))
@example(STUDY + TRIAL + told(b"[2.5]"))  # as a search tells it
@example(b'{"op_code": 0, "worker_id": "w", "study_name": "lr", "directions": [1, 1]}\n'
         + TRIAL + told(b"[1.0, 2.0]"))  # two objectives: no study of a search
@given(st.data())
@examples(30)
def test_a_study_journal_damaged_or_edited(tmp_path_factory, journal_lines, data):
    """``sweep --status`` and a search open the root's study journal: read, its studies and
    trials are Optuna's records (a best value among those told); refused, one line naming
    the journal."""
    if isinstance(data, bytes):
        raw = data
    else:
        lines = list(journal_lines)
        for _ in range(data.draw(st.integers(1, 3))):
            if not lines:
                break
            i = data.draw(st.integers(0, len(lines) - 1))
            kind = data.draw(st.sampled_from(["json", "bytes", "drop", "copy", "cut"]))
            if kind == "json":
                edited = gen.mutated_json(json.loads(data.draw(st.sampled_from(journal_lines))))
                lines[i] = json.dumps(data.draw(edited)).encode() + b"\n"
            elif kind == "bytes":
                lines[i] = data.draw(gen.damaged_bytes(lines[i]))
            elif kind == "drop" and len(lines) > 1:
                del lines[i]
            elif kind == "copy":
                lines.insert(i, lines[i])
            else:
                lines = lines[:i]
        raw = b"".join(lines)
    path = tmp_path_factory.mktemp("root") / "study.journal"
    path.write_bytes(raw)

    def read():
        summaries = optuna.get_all_study_summaries(studies.open_storage(str(path)))
        return [(s.study_name, s.n_trials, s.best_trial and s.best_trial.value)
                for s in summaries]

    ok, read_back = outcome(read, names=[str(path)], expect={
        b'{"op_code": 99}\n': False, STUDY + TRIAL + told(b"[2.5]"): True}.get(data))
    if ok:
        accepted(all(isinstance(name, str) and n >= 0 and (best is None or isinstance(best, float))
                     for name, n, best in read_back) and (
            data != STUDY + TRIAL + told(b"[2.5]") or read_back == [("lr", 1, 2.5)]),
            f"{path} read as {read_back}")
