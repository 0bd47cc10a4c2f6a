"""Shared test helpers: a tiny config on the built-in corpus, as a config, as overrides and as
a sweep; a command run in the test's own process."""

import contextlib
import dataclasses
import importlib.util
import io
import logging
import os
import runpy
import sys
import warnings
from pathlib import Path

import jax
import ml_collections
import numpy as np
from absl import app as _app, flags, logging as absl_logging  # noqa: F401 -- see run_command

from transformer_jax import config as config_lib
from transformer_jax.model.spec import TransformerConfig
from transformer_jax.training.step import create_train_state, make_executor

ROOT = Path(__file__).resolve().parents[1]
TINY = TransformerConfig(vocab_size=40, num_layers=2, d_model=32, d_ff=64, num_heads=4, d_k=8,
                         d_v=8, dropout_rate=0.0, max_len=32)
# The peak FLOP/s of tiny runs, given so that they skip the CPU's matmul probe (seconds a
# process; their MFU means nothing). A run with train.peak_flops = 0 probes (test_main.py).
TINY_PEAK_FLOPS = 1e12


def workdir_spec(workdir):
    """The spec of a trained workdir's config.json, as the commands that use its model build
    it (restore.WorkdirSpec)."""
    from transformer_jax.config import resume
    from transformer_jax.evaluation import restore

    return restore.WorkdirSpec.from_config(resume.workdir_config(workdir))


def tiny_config(data_dir, **train):
    """A seconds-long run on the built-in corpus: 1 layer, d_model 32, 16-token rows."""
    c = config_lib.build("base", "builtin")
    c.data.data_dir = str(data_dir)
    c.data.vocab_size = 200
    c.data.vocab_sample = 200_000
    c.data.max_len = 32
    c.data.tokens_per_batch = 16 * 32
    # A run of seconds reads a few thousand of the corpus's 100,000 pairs: tokenizing them all
    # into a token cache first would cost more than it saves (test_token_cache.py tests it).
    c.data.token_cache = False
    c.model.update(num_layers=1, d_model=32, d_ff=64, num_heads=4, max_len=64, dropout_rate=0.1)
    c.optim.warmup_steps = 20
    c.train.update(num_steps=20, log_every=5, eval_every=10, eval_batches=2,
                   checkpoint_every=10, devices=1, peak_flops=TINY_PEAK_FLOPS)
    c.train.update(train)
    return c


def command_line(config, base="base", dataset="builtin"):
    """``--config=...`` and the ``--config.FIELD=VALUE`` flags that give ``config`` on the
    command line: one per field that differs from the named variant's."""
    reference = config_lib.build(base, dataset)
    flags = [f"--config=configs/base.py:{base},dataset={dataset}"]
    for section, fields in config.items():
        if not isinstance(fields, ml_collections.ConfigDict):
            continue
        for field, value in fields.items():
            if value != reference[section][field]:
                flags.append(f"--config.{section}.{field}={value}")
    return flags


@dataclasses.dataclass
class Ran:
    """What a command printed and its exit status, as subprocess.run's result holds them."""

    returncode: int
    stdout: str
    stderr: str


def run_command(name, *args, stdin=b""):
    """``python -m transformer_jax.NAME ARGS`` run in this process, from the repository root:
    the module's ``__main__`` block as a process runs it (absl's flags and app, the logging
    set-up, the one-line errors and exit statuses), without starting Python and importing JAX
    again. ``stdin`` (bytes) is its standard input.

    Afterwards the flags it defined are deleted and the logging set-up, the working
    directory, sys.argv and sys.stdin put back, so that commands can run one after another.
    TRANSFORMER_JAX_TRACEBACK is unset meanwhile: a refusal must be one line. (absl's app,
    which defines flags of its own as it is imported, is imported with this module, so that
    its flags are not taken for a command's.) What only a
    process shows (its start, signals, pipes) is left to one subprocess test per command.
    """
    module = f"transformer_jax.{name}"
    defined, imported = set(flags.FLAGS), set(sys.modules)
    root = logging.getLogger()
    levels = {logger: logger.level for logger in [root, *logging.root.manager.loggerDict.values()]
              if isinstance(logger, logging.Logger)}
    handlers = root.handlers[:]
    # absl's handler writes to the stderr of absl's import, here the test's captured one,
    # and the command's logging set-up closes it: pointed at the command's stderr meanwhile,
    # it closes nothing of the test's.
    absl_handler = absl_logging.get_absl_handler().python_handler
    absl_stream, argv, stdin_, cwd = absl_handler.stream, sys.argv, sys.stdin, os.getcwd()
    traceback = os.environ.pop("TRANSFORMER_JAX_TRACEBACK", None)
    out, err = io.StringIO(), io.StringIO()
    returncode = 0
    try:
        os.chdir(ROOT)
        sys.argv = [importlib.util.find_spec(module).origin, *args]
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                warnings.catch_warnings():
            absl_handler.stream = err
            # runpy's note that a test imported the module before is no concern here.
            warnings.filterwarnings("ignore", "'transformer_jax", RuntimeWarning)
            try:
                runpy.run_module(module, run_name="__main__", alter_sys=True)
            except SystemExit as e:
                if isinstance(e.code, str):  # sys.exit("message"), as the interpreter does
                    print(e.code, file=sys.stderr)
                returncode = e.code if isinstance(e.code, int) else int(e.code is not None)
    finally:
        absl_handler.stream, sys.argv, sys.stdin = absl_stream, argv, stdin_
        os.chdir(cwd)
        if traceback is not None:
            os.environ["TRANSFORMER_JAX_TRACEBACK"] = traceback
        for flag in set(flags.FLAGS) - defined:
            # A library the command imported first defined its flags at that import and
            # reads them again later (array_record's grain_* flags, whenever it opens a
            # split): they stay, as it will not define them again. The command's flags go.
            owner = flags.FLAGS.find_module_defining_flag(flag)
            if owner in sys.modules and owner not in imported and not _is_ours(owner):
                continue
            delattr(flags.FLAGS, flag)
        root.handlers[:] = handlers
        for logger in [root, *logging.root.manager.loggerDict.values()]:
            if isinstance(logger, logging.Logger):
                logger.setLevel(levels.get(logger, logging.NOTSET))
    return Ran(returncode, out.getvalue(), err.getvalue())


def _is_ours(module):
    """Whether a module (a name, or the path of one run as a command) is this project's."""
    return module.startswith(("transformer_jax", str(ROOT / "transformer_jax")))


def random_batch(rows, length, seed, fixed_lengths=None):
    """A packed-looking batch: two segments per row, then padding."""
    rng = np.random.default_rng(seed)
    batch = {}
    for f in ("inputs", "targets"):
        seg = np.zeros((rows, length), np.int32)
        pos = np.zeros((rows, length), np.int32)
        for r in range(rows):
            a, b = fixed_lengths or (rng.integers(2, length // 2), 0)
            b = b or rng.integers(2, length - a)
            seg[r, :a], seg[r, a:a + b] = 1, 2
            pos[r, :a], pos[r, a:a + b] = np.arange(a), np.arange(b)
        batch[f] = np.where(seg > 0, rng.integers(3, 40, (rows, length)), 0).astype(np.int32)
        batch[f + "_segment_ids"] = seg
        batch[f + "_positions"] = pos
    return batch


def run_steps(batches, eps=1e-9, parallel_kind="sharded", devices=1, model_parallel=1,
              model_config=TINY, accum=1, with_grad_norms=False):
    """Losses and final params of a few train steps on ``devices`` CPU devices; with
    ``accum`` > 1 each step's batch is ``accum`` micro-batches stacked on a leading axis."""
    config = config_lib.build("base")
    config.optim.warmup_steps = 10
    config.optim.eps = eps
    config.optim.grad_accum_steps = accum
    config.train.update(parallel=parallel_kind, devices=devices, model_parallel=model_parallel)
    state = create_train_state(config, model_config, jax.random.key(0))
    executor = make_executor(config, model_config, state)
    placed = executor.place(state)
    losses, norms = [], []
    for batch in batches:
        placed, metrics = executor.train(placed, batch, jax.random.key(1))
        m = executor.fetch(metrics)
        losses.append(m["loss_sum"] / m["tokens"])
        norms.append(m["grad_norm"])
    if with_grad_norms:
        return losses, executor.params(placed), norms
    return losses, executor.params(placed)


def tiny_overrides(data_dir, **more):
    """tiny_config as ``{"section.field": value}`` overrides, for sweeps and commands:
    seconds-long runs on the built-in corpus, one device, no CPU-peak probe."""
    overrides = {
        "data.name": "builtin", "data.data_dir": str(data_dir), "data.vocab_size": 200,
        "data.vocab_sample": 200_000, "data.max_len": 32, "data.tokens_per_batch": 16 * 32,
        "model.num_layers": 1, "model.d_model": 32, "model.d_ff": 64, "model.max_len": 64,
        "optim.warmup_steps": 20, "train.num_steps": 10, "train.log_every": 5,
        "train.eval_every": 10, "train.eval_batches": 2, "train.checkpoint_every": 10,
        "train.devices": 1, "train.peak_flops": TINY_PEAK_FLOPS, "train.bleu_sentences": 4,
    }
    overrides.update(more)
    return overrides


# A point that is valid but fails when it runs: its corpus files do not exist.
BROKEN_POINT = ("{'name': 'broken', 'variant': 'base', 'data.name': 'text', "
                "'data.train_files': 'no/such/file.tsv', 'data.eval_files': 'no/such/file.tsv', "
                "'data.test_files': 'no/such/file.tsv'}")
# Three points of a tiny sweep: two that train and the broken one.
TINY_POINTS = f"{{'variant': 'base'}}, {{'variant': 'D_ls0'}}, {BROKEN_POINT}"


def tiny_experiment(path, data_dir, points=TINY_POINTS):
    """Writes an experiment file 'tiny' over label smoothing (eps_ls) with tiny_overrides;
    ``points`` is the Python source of its points (dicts). Returns the path as a string."""
    path.write_text(
        "from transformer_jax.sweeps.experiment import Sweep\n"
        "def get_sweep(arg=None):\n"
        f"    return Sweep('tiny', 'configs/table3.py', [{points}], parameter='eps_ls',\n"
        f"                 overrides={tiny_overrides(data_dir)!r})\n")
    return str(path)


def greedy_by_hand(params, model_config, vocab_model):
    """Greedy translation written out from its description, without the decoding code: a
    function of (sentence, offset). The source's pieces by SentencePiece itself and EOS, at
    most the model's max_len (its first max_len - 1 and EOS); then token after token the most
    probable (padding never) of the model's logits for the whole prefix, recomputed each time
    (no cache), until EOS or len(source) - 1 + ``offset`` tokens within max_len; the pieces
    before EOS joined by SentencePiece. ``vocab_model``: the workdir's spm.model."""
    import jax.numpy as jnp
    import sentencepiece

    from transformer_jax.model.transformer import Transformer

    sp = sentencepiece.SentencePieceProcessor(model_file=str(vocab_model))
    n = model_config.max_len
    model = Transformer(model_config.replace(deterministic=True))
    # Every target position is a token (segment 1): the one after the prefix is its padding.
    forward = jax.jit(lambda src, out: model.apply({"params": params}, src, out,
                                                   targets_segment_ids=jnp.ones_like(out)))
    padded = lambda ids: jnp.asarray([ids + [0] * (n - len(ids))], jnp.int32)  # noqa: E731

    def translate_one(sentence, offset):
        src = sp.encode(sentence) + [1]  # EOS is id 1
        src = src if len(src) <= n else [*src[: n - 1], 1]
        out: list[int] = []
        while len(out) < min(len(src) - 1 + offset, n) and 1 not in out:
            logits = np.array(forward(padded(src), padded(out))[0, len(out)])
            logits[0] = -np.inf
            out.append(int(np.argmax(logits)))
        return sp.decode([i for i in out if i != 1])

    return translate_one
