"""Every command flag that names a file or folder to write, given any path: a name with a NUL
or a newline, too long, empty, a file where a folder is wanted or the reverse, under a file
or a named pipe, a folder not yet made. Each flag is checked by the call its command makes
before it reads or computes anything; accepted, what the command writes there is written
and reads back; refused, in one UserError naming the flag or the path."""

import os
import tempfile
from pathlib import Path

from hypothesis import example, given, strategies as st

from transformer_jax.exports import mapping
from transformer_jax.io import storage
from transformer_jax.training import faults

from .fuzzing import accepted, examples, outcome

# flag: (the check its command makes, what it then writes: "folder", "file" or "new folder")
WRITERS = {
    "main --workdir": (lambda p: faults.check_workdir(p, 1, 1), "folder"),
    "sweep --root": (lambda p: storage.check(p, "--root"), "folder"),
    "compare --out": (lambda p: storage.check(p, "--out"), "folder"),
    "visualize --out": (lambda p: storage.check(p, "--out"), "folder"),
    "prepare --data_dir": (lambda p: storage.check(p, "--data_dir"), "folder"),
    "translate --output": (lambda p: p == "-" or storage.check_file(p, "--output"), "file"),
    "export --out": (mapping.check_new, "new folder"),
}
# Names under a folder holding a file, a folder, a named pipe and a symbolic link to nothing
# (never ".." : the paths stay inside it).
NAMES = st.one_of(
    st.sampled_from(["run", "a b", "ü", ".", "x" * 300, "a\x00b", "\x00", "a\nb", " ", "",
                     "file", "dir", "pipe", "dangling", "file/sub", "pipe/sub", "dir/new/deeper",
                     "dir/", "new/", "~", "-", "\u202eevil", "a:b"]),
    st.text(max_size=12).filter(lambda t: ".." not in t))
# What the explicit examples must give: True written, False refused.
EXPECTED = {("main --workdir", "run"): True, ("export --out", "new"): True,
            ("translate --output", "dir/out.txt"): True, ("export --out", "a\x00b"): False,
            ("translate --output", "run\x00.txt"): False, ("main --workdir", "file"): False,
            ("translate --output", "dir"): False, ("export --out", "dangling"): False,
            ("export --out", "dir"): False}


@examples(40)
@given(st.sampled_from(sorted(WRITERS)), NAMES)
@example("main --workdir", "run")
@example("export --out", "new")
@example("translate --output", "dir/out.txt")
@example("export --out", "a\x00b")  # found: ValueError: embedded null byte
@example("translate --output", "run\x00.txt")
@example("main --workdir", "file")
@example("translate --output", "dir")
@example("export --out", "dangling")  # found: accepted, the link replaced by the export
@example("export --out", "dir")
def test_any_output_path_is_written_or_one_line(flag, name):
    check, kind = WRITERS[flag]
    with tempfile.TemporaryDirectory() as directory:
        base = Path(directory)
        (base / "file").write_text("x")
        (base / "dir").mkdir()
        os.mkfifo(base / "pipe")
        (base / "dangling").symlink_to(base / "nowhere")
        given_path = f"{directory}/{name}"
        ok, _ = outcome(lambda: check(given_path), names=[flag.split()[-1], given_path,
                                                         "workdir"],
                        expect=EXPECTED.get((flag, name)))
        if not ok:
            return
        target = storage.path(given_path)
        if kind == "folder":
            storage.write_atomically(target / "written.txt", "a line\n")
            wrote = (target / "written.txt").read_text() == "a line\n"
        elif kind == "file":
            storage.write_atomically(target, "a line\n")
            wrote = target.read_text() == "a line\n"
        else:
            with mapping.writing(given_path) as out:
                Path(out, "written.txt").write_text("a line\n")
            wrote = (target / "written.txt").read_text() == "a line\n"
        accepted(wrote, f"{flag}={given_path!r} accepted, then not written")
