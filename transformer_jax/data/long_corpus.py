"""Long sentences for the built-in corpus, and a corpus to test length generalisation with.

The grammar of ``corpus.py`` writes sentences of 3 to 24 words. Here sentences are
coordinated, as long as wanted: two or more statements (any of ``corpus.py``'s sentence
shapes but questions) joined by ", and" / "und" or ", but" / ", aber" (the English comma tells
joined clauses from joined noun phrases, "the dog and the cat", so every English sentence
still has one reading and one translation). Coordination leaves each part's German word order
as it is (a coordinating conjunction takes no position), so a long sentence is made of parts
like the short ones; what is new in it is its length::

    The dog sleeps , and I know that the cat sings , but the man has seen the bird .
    Der Hund schläft und ich weiß , dass die Katze singt , aber der Mann hat den Vogel gesehen .

:func:`build_long_corpus` is the ``builtin_long`` dataset: train and validation pairs whose
source has at most ``MAX_TRAIN_WORDS`` = L words (whitespace-separated, punctuation attached,
as stored), a third of them coordinated; and a test split spread evenly over the source
lengths of ``TEST_BUCKETS``, up to 3L (up to L drawn as the training pairs are, beyond it
coordinated). ``corpus.build_corpus`` (the ``builtin`` dataset) is not changed.
"""

from __future__ import annotations

import random
from typing import NamedTuple

from transformer_jax.data import corpus, grammar

# L: the longest source, in words, of the train and validation splits.
MAX_TRAIN_WORDS = 16
# The test split's source lengths, in words: (shortest, longest) of each bucket, up to 3L.
TEST_BUCKETS = ((1, 16), (17, 24), (25, 32), (33, 40), (41, 48))
SPLITS = {"train": 100_000, "validation": 1_000, "test": 1_000}
# English and German coordinating conjunctions, as tokens.
CONJUNCTIONS = {"and": ([",", "and"], ["und"]), "but": ([",", "but"], [",", "aber"])}
# Draws of a sentence before its length is given up as one the grammar hardly makes.
DRAWS = 10_000
# The share of coordinated pairs in the train and validation splits.
COORDINATED_SHARE = 1 / 3


class Coordinated(NamedTuple):
    """Statements joined by conjunctions: ``conjs[i]`` (a key of ``CONJUNCTIONS``) comes
    between ``parts[i]`` and ``parts[i + 1]``."""

    parts: tuple[grammar.Sentence, ...]
    conjs: tuple[str, ...]


def render_coordinated(c: Coordinated) -> tuple[str, str]:
    """The (english, german) strings of a coordinated sentence, in ``corpus.py``'s form."""
    if len(c.conjs) != len(c.parts) - 1 or any(s.question for s in c.parts):
        raise ValueError(f"{len(c.parts)} statements need {len(c.parts) - 1} conjunctions "
                         "and no question")
    en, de = grammar.render_tokens(c.parts[0])
    for conj, part in zip(c.conjs, c.parts[1:], strict=True):
        part_en, part_de = grammar.render_tokens(part)
        en, de = [*en, *CONJUNCTIONS[conj][0], *part_en], [*de, *CONJUNCTIONS[conj][1], *part_de]
    return grammar.finish(en, "."), grammar.finish(de, ".")


def words(text: str) -> int:
    """Length of a stored sentence in words: its whitespace-separated pieces."""
    return len(corpus.detokenize(text).split())


def _statement(rng: random.Random) -> grammar.Sentence:
    while (s := corpus.sample_sentence(rng)).question:
        pass
    return s


def generate_long_pair(rng: random.Random, shortest: int, longest: int,
                       coordinated: bool = True) -> tuple[str, str]:
    """A random (english, german) pair whose English has ``shortest`` to ``longest`` words:
    a statement or question of ``corpus.py`` as it comes, or (``coordinated``) statements
    joined until the sentence is long enough; drawn again until it fits. ValueError after
    ``DRAWS`` draws that do not (lengths the grammar hardly makes)."""
    for _ in range(DRAWS):
        if not coordinated:
            en, de = grammar.render_sentence(corpus.sample_sentence(rng))
        else:
            parts, conjs = [_statement(rng)], []
            en, de = render_coordinated(Coordinated(tuple(parts), ()))
            while words(en) < shortest or len(parts) < 2:
                conjs.append(rng.choice(tuple(CONJUNCTIONS)))
                parts.append(_statement(rng))
                en, de = render_coordinated(Coordinated(tuple(parts), tuple(conjs)))
        if shortest <= words(en) <= longest:
            return en, de
    raise ValueError(f"no sentence of {shortest} to {longest} words in {DRAWS} draws")


def build_long_corpus(seed: int = 0, sizes: dict[str, int] | None = None,
                      max_train_words: int = MAX_TRAIN_WORDS,
                      test_buckets: tuple[tuple[int, int], ...] = TEST_BUCKETS
                      ) -> dict[str, list[tuple[str, str]]]:
    """The ``builtin_long`` corpus as ``{split: [(english, german), ...]}``, deterministic in
    its arguments: train and validation sources of at most ``max_train_words`` words, the
    test split's spread over ``test_buckets`` in turn. English sentences are distinct within
    and across splits; held-out splits are drawn first, each from its own seeded stream.
    ValueError if a split cannot be filled."""
    def draw(rng: random.Random, name: str, drawn: int) -> tuple[str, str]:
        shortest, longest = 1, max_train_words
        if name == "test":
            shortest, longest = test_buckets[drawn % len(test_buckets)]
        # Beyond L every sentence is coordinated; up to L a share, as in training.
        coordinated = longest > max_train_words or rng.random() < COORDINATED_SHARE
        return generate_long_pair(rng, shortest, longest, coordinated)

    return corpus.draw_splits(dict(SPLITS if sizes is None else sizes),
                              f"long_corpus:{seed}", draw)
