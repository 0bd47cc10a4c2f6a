"""Translate sentences with a trained model: the command-line entry point.

    python -m transformer_jax.translate --workdir=runs/base [--input=src.txt] \
        [--output=out.txt] [--average=N] [--config.decode.strategy=greedy ...]

Reads one source sentence per line from ``--input`` (default: stdin) and writes one
translation per line, in input order, to ``--output`` (default: stdout). Empty or
whitespace-only lines give empty lines. Decoding follows the ``decode`` section of the
workdir's config (the paper's beam search by default), which ``--config.decode.FIELD=VALUE``
overrides. The parameters are averaged over the run's last checkpoints as ``evaluate`` does
(the config's number, 5 for base and 20 for big; ``--average=1``: the latest alone). Progress,
the checkpoints averaged and any warning about them go to stderr.

A line longer than the model takes (``model.max_len`` tokens) is shortened to it, each such
line named on stderr (its number and length) before translating, then their count;
``--max_input_len=N`` (at most the model's limit) refuses instead a line longer than N tokens,
before anything is translated or written.
"""

from __future__ import annotations

import functools
import logging
import sys
from typing import Any

from transformer_jax import cli
from transformer_jax.config import resume
from transformer_jax.errors import DataError
from transformer_jax.io import storage

TRANSLATE_OVERRIDES = ("decode",)


def input_name(path: str) -> str:
    """How messages name the input ``path`` ("-": stdin)."""
    return "<stdin>" if path == "-" else path


def read_lines(path: str) -> list[str]:
    """The lines of ``path`` ("-": stdin) as text, without line ends.

    Raises DataError naming the line of the first invalid UTF-8.
    """
    name = input_name(path)
    data = sys.stdin.buffer.read() if path == "-" else storage.path(path).read_bytes()
    data = data.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte-order mark is not text
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    out = []
    for number, raw in enumerate(lines, start=1):
        try:
            out.append(raw.decode("utf-8").removesuffix("\r"))
        except UnicodeDecodeError as e:
            raise DataError(f"{name} line {number}: not valid UTF-8 (byte "
                            f"0x{raw[e.start]:02x} at byte {e.start + 1})") from None
    return out


def write_lines(path: str, lines: list[str]) -> None:
    """One line per string to ``path`` ("-": stdout), written whole or not at all."""
    text = "".join(line.replace("\n", " ") + "\n" for line in lines)
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    storage.write_atomically(path, text)


def main(argv: list[str], flags_: dict[str, Any]) -> None:
    cli.no_extra_args(argv)
    with cli.clean_errors():
        from tqdm import tqdm

        from transformer_jax.evaluation import restore, translation

        workdir = flags_["workdir"].value
        run = restore.WorkdirSpec.from_config(resume.workdir_config(
            workdir, cli.override_values(flags_["config"]), TRANSLATE_OVERRIDES))
        source = flags_["input"].value
        sentences = read_lines(source)
        output = flags_["output"].value
        if output != "-":
            storage.check_file(output, "--output")
        max_input_len = flags_["max_input_len"].value
        limit = translation.input_limit(run.model.max_len, max_input_len)
        loaded = restore.load_workdir(workdir, run, flags_["average"].value)
        for note in loaded.notes:
            logging.warning("warning: %s", note)
        where = f"{input_name(source)} line"
        long = translation.long_inputs(loaded.tokenizer, sentences, limit)
        if max_input_len is not None:
            translation.refuse_long(where, long, limit)
        for line in translation.shortened_report(where, long, len(sentences), "lines", limit):
            print(line, file=sys.stderr)
        with tqdm(total=len(sentences), desc="translating", unit=" sentences",
                  file=sys.stderr) as bar:
            translations = translation.translate(loaded.params, loaded.model_config,
                                                 loaded.tokenizer, sentences, run.decode,
                                                 bar.update)
        write_lines(output, translations)


if __name__ == "__main__":
    from absl import flags

    cli.run(functools.partial(main, flags_={
        "workdir": cli.define_workdir_flag(),
        "config": cli.define_overrides_flag(),
        "input": cli.define_path_flag("input", "Source sentences, one per line; - is stdin.",
                                      required=False, default="-"),
        "output": cli.define_path_flag("output", "Where the translations go; - is stdout.",
                                       required=False, default="-"),
        "average": flags.DEFINE_integer(
            "average", None, "Average the parameters of the last N checkpoints; 1: the latest "
            "alone. Default: the run's train.average_checkpoints (0: train.keep_checkpoints), "
            "or all the workdir holds if fewer.", lower_bound=1),
        "max_input_len": flags.DEFINE_integer(
            "max_input_len", None, "Refuse a line longer than N tokens (at most the model's "
            "model.max_len) instead of shortening it to the model's limit with a warning.",
            lower_bound=1),
    }))
