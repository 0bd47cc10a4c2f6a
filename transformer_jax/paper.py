"""The paper's published figures, as data: what our results are compared against.

Vaswani et al., "Attention Is All You Need" (2017). Table 3: variations on the base model,
English-German, dev set newstest2013, perplexity per word-piece and BLEU with beam search and
no checkpoint averaging; ``params`` in millions where the paper lists it.
"""

from __future__ import annotations

# variant -> (PPL, BLEU, params in millions or None)
TABLE3: dict[str, tuple[float, float, float | None]] = {
    "base": (4.92, 25.8, 65),
    "A_h1": (5.29, 24.9, None),
    "A_h4": (5.00, 25.5, None),
    "A_h16": (4.91, 25.8, None),
    "A_h32": (5.01, 25.4, None),
    "B_dk16": (5.16, 25.1, 58),
    "B_dk32": (5.01, 25.4, 60),
    "C_N2": (6.11, 23.7, 36),
    "C_N4": (5.19, 25.3, 50),
    "C_N8": (4.88, 25.5, 80),
    "C_d256": (5.75, 24.5, 28),
    "C_d1024": (4.66, 26.0, 168),
    "C_ff1024": (5.12, 25.4, 53),
    "C_ff4096": (4.75, 26.2, 90),
    "D_drop0": (5.77, 24.6, None),
    "D_drop02": (4.95, 25.5, None),
    "D_ls0": (4.67, 25.3, None),
    "D_ls02": (5.47, 25.7, None),
    "E_learned": (4.92, 25.7, None),
    "big": (4.33, 26.4, 213),
}

# Table 2: newstest2014 BLEU and training cost in FLOPs.
TABLE2: dict[str, dict[str, float]] = {
    "base": {"en_de_bleu": 27.3, "en_fr_bleu": 38.1, "train_flops": 3.3e18},
    "big": {"en_de_bleu": 28.4, "en_fr_bleu": 41.8, "train_flops": 2.3e19},
}

VOCAB_SIZE_EN_DE = 37000
VOCAB_SIZE_EN_FR = 32000
