"""Your own parallel data from plain text: any variant (base by default) on your files.

    python -m transformer_jax.main --config=configs/text.py --workdir=runs/mine \
        --config.data.train_files=train.en,train.de \
        --config.data.eval_files=dev.en,dev.de \
        --config.data.test_files=test.en,test.de

Each ``*_files`` field is ``"source.txt,target.txt"`` (one sentence per line, line-aligned)
or ``"pairs.tsv"`` (``source<TAB>target`` per line), UTF-8. Empty pairs and lines that are
not UTF-8 are skipped and reported; files of different lengths and TSV lines without one tab
are refused naming file and line (transformer_jax/data/text.py). test_files may stay empty
when train.bleu_sentences and train.samples are 0. The vocabulary, packing and checkpointed
loader are those of WMT, but the packed rows are sized to your sentences (data.row_len=0: the
smallest multiple of 64 slots that holds 99.9% of them, recorded in the workdir; pairs longer
than a row are counted and skipped). Set data.vocab_size to suit the data (37,000 by default).
"""

from transformer_jax import config as config_lib


def get_config(arg: str | None = None):
    return config_lib.from_arg(arg, "base", default_dataset="text")
