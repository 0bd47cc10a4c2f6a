"""The MarianMT export of the tiny trained model: read back without PyTorch (safetensors and
config.json, through --from_hf) it gives our logits again; against transformers' MarianMT
(slow, needs the hf extra) its logits agree both ways and greedy search gives our ids."""

import json
import shutil

import jax
import numpy as np
import pytest

pytest.importorskip("safetensors")

from transformer_jax.data.pipeline import pad_batch  # noqa: E402
from transformer_jax.data.tokenizer import EOS_ID  # noqa: E402
from transformer_jax.decoding import decode  # noqa: E402
from transformer_jax.exports import hf, mapping  # noqa: E402
from transformer_jax.model.transformer import Transformer, shift_right  # noqa: E402

from ..helpers import run_command  # noqa: E402

# A padded batch of several lengths: sources and targets ending with EOS.
SOURCES = [[5, 6, 7, 8, 9, 10, EOS_ID], [11, 12, EOS_ID], [13, EOS_ID], [14, 15, 16, 17, EOS_ID]]
TARGETS = [[20, 21, 22, EOS_ID], [23, EOS_ID], [24, 25, 26, 27, 28, EOS_ID], [29, 30, EOS_ID]]


def _logits(loaded):
    src = pad_batch(SOURCES, max(map(len, SOURCES)))
    tgt = pad_batch(TARGETS, max(map(len, TARGETS)))
    model = Transformer(loaded.model_config.replace(deterministic=True))
    return np.asarray(model.apply({"params": loaded.params}, src, tgt)), np.asarray(tgt) != 0


@pytest.fixture(scope="module")
def exported(trained_workdir, tmp_path_factory):
    out = tmp_path_factory.mktemp("hf") / "marian"
    ran = run_command("export", "hf", f"--workdir={trained_workdir}", f"--out={out}",
                      "--average=1")
    assert ran.returncode == 0, ran.stderr
    return out


def test_the_directory_holds_what_marian_reads(exported):
    config = json.loads((exported / "config.json").read_text())
    assert (config["activation_function"], config["scale_embedding"],
            config["pad_token_id"], config["eos_token_id"],
            config["decoder_start_token_id"]) == ("relu", True, 0, 1, 0)
    vocab = json.loads((exported / "vocab.json").read_text())
    assert (vocab["<pad>"], vocab["</s>"], vocab["<unk>"]) == (0, 1, 2)
    assert len(vocab) == config["vocab_size"]
    assert (exported / "source.spm").read_bytes() == (exported / "target.spm").read_bytes()
    card = (exported / "README.md").read_text()
    assert "## Provenance" in card and "## Final metrics" in card


def test_read_back_it_gives_our_logits(trained_workdir, exported, tmp_path):
    workdir = tmp_path / "back"
    ran = run_command("export", "hf", f"--from_hf={exported}", f"--out={workdir}")
    assert ran.returncode == 0, ran.stderr
    ours, mask = _logits(mapping.load(trained_workdir, 1)[0])
    back, _ = _logits(mapping.load(workdir, 1)[0])
    assert np.abs(ours - back)[mask].max() < 1e-5


def test_the_channel_permutation_puts_sines_first():
    # Worked out by hand for d = 6: MarianMT's channels 0-2 are our sines 0, 2, 4.
    assert hf.channels(6).tolist() == [0, 2, 4, 1, 3, 5]


def test_a_damaged_marian_directory_is_one_line(exported, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(exported, broken)
    (broken / "model.safetensors").write_bytes(b"not safetensors")
    ran = run_command("export", "hf", f"--from_hf={broken}", f"--out={tmp_path / 'w'}")
    assert ran.returncode == 2
    assert "model.safetensors: damaged" in ran.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "w").exists()
    gelu = tmp_path / "gelu"
    shutil.copytree(exported, gelu)
    config = json.loads((gelu / "config.json").read_text())
    (gelu / "config.json").write_text(json.dumps({**config, "activation_function": "gelu"}))
    ran = run_command("export", "hf", f"--from_hf={gelu}", f"--out={tmp_path / 'w'}")
    assert ran.returncode == 2 and "activation_function='gelu'" in ran.stderr


@pytest.mark.slow
def test_transformers_gives_our_logits_and_greedy_ids(trained_workdir, exported, tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    loaded = mapping.load(trained_workdir, 1)[0]
    ours, mask = _logits(loaded)
    model = transformers.MarianMTModel.from_pretrained(str(exported)).eval()
    src = np.asarray(pad_batch(SOURCES, max(map(len, SOURCES))))
    tgt = pad_batch(TARGETS, max(map(len, TARGETS)))
    with torch.no_grad():
        theirs = model(input_ids=torch.tensor(src), attention_mask=torch.tensor(src != 0),
                       decoder_input_ids=torch.tensor(np.asarray(shift_right(tgt)))).logits
    gap = np.abs(theirs.numpy() - ours)[mask].max()
    print(f"max |logit difference| on a padded batch: {gap:.3g}")
    assert gap < 1e-4
    # Back: the directory read into our model gives transformers' logits.
    assert run_command("export", "hf", f"--from_hf={exported}",
                       f"--out={tmp_path / 'back'}").returncode == 0
    back, _ = _logits(mapping.load(tmp_path / "back", 1)[0])
    gap = np.abs(theirs.numpy() - back)[mask].max()
    print(f"read back: max |logit difference| against transformers: {gap:.3g}")
    assert gap < 1e-4
    max_len = 20
    greedy = np.asarray(decode.greedy_decode(loaded.params, src, config=loaded.model_config,
                                             max_len=max_len))
    with torch.no_grad():
        generated = model.generate(input_ids=torch.tensor(src),
                                   attention_mask=torch.tensor(src != 0), num_beams=1,
                                   do_sample=False, max_new_tokens=max_len).numpy()
    for row, out in zip(greedy, generated, strict=True):
        mine = row.tolist()[: row.tolist().index(EOS_ID) + 1 if EOS_ID in row else max_len]
        assert out[1:1 + len(mine)].tolist() == mine


@pytest.mark.slow
def test_training_resumes_from_the_read_back_workdir(exported, tmp_path):
    from transformer_jax.config import resume
    from transformer_jax.training import train

    workdir = tmp_path / "back"
    assert run_command("export", "hf", f"--from_hf={exported}",
                       f"--out={workdir}").returncode == 0
    imported = mapping.load(workdir, 1)[0].params
    config = resume.workdir_config(workdir)
    config.train.update(num_steps=1, bleu_every=0)
    train.train_and_evaluate(config, workdir)
    assert sorted(p.name for p in (workdir / "checkpoints").iterdir()) == ["0", "1"]
    stepped = mapping.load(workdir, 1)[0]
    assert stepped.steps == [1]
    # One Adam step of the warmup's first learning rate (d_model^-0.5 x warmup^-1.5 =
    # 0.002 here) moves no parameter further than that: training went on from the import.
    lr = config.model.d_model ** -0.5 * config.optim.warmup_steps ** -1.5
    moved = max(float(np.abs(a - b).max()) for a, b in zip(
        jax.tree.leaves(imported), jax.tree.leaves(stepped.params), strict=True))
    assert 0 < moved <= lr * 1.01
