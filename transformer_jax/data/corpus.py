"""A generated English -> German-like parallel corpus: the project's built-in dataset.

Sentences come from a small hand-written grammar and are rendered into both languages from one
abstract structure, so the German side is a deterministic function of the English side (every
English string has exactly one translation and BLEU 100 is reachable), while the mapping is far
from word-by-word: translating it needs attention over the whole source sentence.

Grammar (``Sentence`` -> ``Clause`` -> ``NP``):

* a sentence is a statement, a yes/no question, a matrix clause with a complement
  ("I know that ...", "she asks whether ...") or a main clause with an adverbial clause
  ("... because / if / although / while ..."), which may also come first;
* a clause has a subject, a verb (intransitive, accusative, dative or ditransitive), its objects,
  an optional prepositional phrase, a tense (present, perfect, "can", "must") and, in main
  clauses, an optional fronted adverb;
* a noun phrase is a pronoun or a determiner ("the", "a", "my", "your", "our" or a number)
  followed by up to two adjectives and a noun or a noun-noun compound; subjects may be two
  coordinated noun phrases.

Phenomena the German side shows:

* word order: verb-final subordinate clauses ("..., dass der Hund die Katze sieht"), V2
  inversion after a fronted adverb or a fronted subordinate clause ("Heute sieht der Hund ..."),
  verb-first questions, the participle or infinitive at the end ("hat ... gesehen",
  "kann ... sehen"), dative before accusative ("gibt dem Kind das Buch");
* agreement: gender (der/die/das), case (nominative, accusative, dative from verbs and
  prepositions, with "im"/"vom" contractions), plural and dative-plural nouns, adjective
  endings (weak, mixed and strong declension), subject-verb agreement for all persons used,
  and the perfect auxiliary chosen by the verb ("hat gesehen" but "ist gelaufen");
* compounds: "the house door" -> "die Haustür", with the head's gender and plural;
* numbers 2..99 as words ("twenty-one dogs" -> "einundzwanzig Hunde"), sometimes as digits;
* umlauts and ß throughout the vocabulary.

Tokenization: tokens are joined by single spaces and punctuation is a token of its own
("Ich weiß , dass der Hund schläft ."); :func:`detokenize` gives the natural form stored
in the dataset ("Ich weiß, dass der Hund schläft."). Hyphenated English numbers
("twenty-one") are one token.
Sentences start with a capital; German nouns are capitalised, English "I" is always upper case.
"you" is always the informal singular "du"; "it" is always "es".

The words are data/lexicon.py's, the structures and their rendering data/grammar.py's; this
module samples sentences and builds the splits.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable

from transformer_jax.data.grammar import NP, Clause, Sentence, render_sentence
from transformer_jax.data.lexicon import (
    ADJECTIVES,
    ADVERBIAL_CONJ,
    ADVERBS,
    COMPOUNDS,
    NOUNS,
    PREPOSITIONS,
    PRONOUNS,
    VERBS,
    Noun,
)

SPLITS: dict[str, int] = {"train": 100_000, "validation": 1_000, "test": 1_000}
"""Default split sizes (number of sentence pairs) used by :func:`build_corpus`."""

MIN_TOKENS, MAX_TOKENS = 4, 25
"""Both sides of every generated pair have this many whitespace tokens (inclusive)."""


# ---------------------------------------------------------------------------------------------
# Sampling


@functools.cache
def _candidates(tags: str) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    def ok(n: Noun) -> bool:
        return tags == "*" or any(t in n.tags for t in tags)

    return (tuple(k for k, n in NOUNS.items() if ok(n)),
            tuple(k for k, n in COMPOUNDS.items() if ok(n)))


_ADJS = {anim: sorted(a for a, (_, _, t) in ADJECTIVES.items() if t in ("*", "a" if anim else "t"))
         for anim in (False, True)}
_SUBJ_PRONOUNS = tuple(PRONOUNS)
_OBJ_PRONOUNS = tuple(p for p in PRONOUNS if p != "it")
_VERB_KINDS = {k: tuple(v for v, verb in VERBS.items() if verb.kind == k)
               for k in ("intr", "acc", "dat", "ditr", "matrix")}
_ADVERB_KEYS, _PREP_KEYS = tuple(ADVERBS), tuple(PREPOSITIONS)
_ANIMATE = frozenset(k for k, n in NOUNS.items() if n.animate)
# A third of the numbers are 2..12, the rest spread over 13..99 (the ones with "-und-").
_NUMBERS = (*range(2, 13), *range(2, 13), *range(2, 13), *range(2, 13), *range(13, 100))
_MATRIX_PERFECT = ("say", "ask")  # "I have said that ..." reads naturally, "I have known" not


def _takes_pronoun(tags: str) -> bool:
    return tags == "*" or "a" in tags


def _sample_np(rng: random.Random, tags: str, pron_p: float = 0.0,
               pronouns: tuple[str, ...] = _OBJ_PRONOUNS, coord_p: float = 0.0) -> NP:
    rand, choice = rng.random, rng.choice
    if pron_p and rand() < pron_p:
        return NP(pronoun=choice(pronouns))
    simple, compounds = _candidates(tags)
    modifier = ""
    if compounds and rand() < 0.2:
        modifier, noun = choice(compounds)
    else:
        noun = choice(simple)
    number, plural, det, digits = 0, False, "the", False
    if rand() < 0.14:
        number = choice(_NUMBERS)
        digits = rand() < 0.1
    else:
        plural = rand() < 0.3
        r = rand()
        if r < 0.18 and not plural:
            det = "a"
        elif r < 0.38:
            det = choice(("my", "your", "our"))
    adjs: tuple[str, ...] = ()
    r = rand()
    if r < 0.3:
        pool = _ADJS[noun in _ANIMATE]
        adjs = (choice(pool),)
        second = choice(pool) if r < 0.04 else adjs[0]
        if ADJECTIVES[second][1] != ADJECTIVES[adjs[0]][1]:
            # English adjective order (opinion, size, state, age, colour); German keeps it.
            adjs = tuple(sorted((adjs[0], second), key=lambda a: ADJECTIVES[a][1]))
    also = _sample_np(rng, tags) if coord_p and rand() < coord_p else None
    return NP(noun, det, plural, adjs, modifier, number, digits, "", also)


def _clashes(c: Clause) -> bool:
    # "I see me" needs a reflexive, which the grammar lacks: one 1st / 2nd person per clause.
    persons = [np.pronoun == "you" for np in (c.subj, c.obj, c.recipient, c.pobj)
               if np is not None and np.pronoun in ("I", "we", "you")]
    return len(persons) != len(set(persons))


def _sample_clause(rng: random.Random, order: str, adverb_p: float = 0.0,
                   matrix: bool = False) -> Clause:
    while True:
        adverb = rng.choice(_ADVERB_KEYS) if order == "main" and rng.random() < adverb_p else ""
        subj = _sample_np(rng, "a", 0.35, _SUBJ_PRONOUNS, coord_p=0.06)
        # After an inverted verb a noun subject would normally follow an object pronoun
        # ("sieht mich der Hund"); avoid the choice by not generating that combination.
        inverted = bool(adverb) or order in ("question", "inverted")
        obj_pron = 0.0 if inverted and not subj.pronoun else 0.15
        if matrix:
            verb = rng.choice(_VERB_KINDS["matrix"])
        else:
            r = rng.random()
            kind = "acc" if r < 0.42 else "dat" if r < 0.54 else "ditr" if r < 0.68 else "intr"
            verb = rng.choice(_VERB_KINDS[kind])
        v = VERBS[verb]
        r = rng.random()
        tense = "present" if r < 0.5 else "perfect" if r < 0.8 else rng.choice(("can", "must"))
        if matrix:
            tense = "perfect" if verb in _MATRIX_PERFECT and r < 0.2 else "present"
        if adverb and tense not in ADVERBS[adverb][1]:
            continue
        obj = recipient = pobj = None
        prep, to_phrase = "", False
        if v.kind in ("acc", "dat"):
            obj = _sample_np(rng, v.tags, obj_pron if _takes_pronoun(v.tags) else 0.0)
        elif v.kind == "ditr":
            recipient = _sample_np(rng, "a", obj_pron)
            obj = _sample_np(rng, v.tags)
            to_phrase = rng.random() < 0.4
        if not matrix and rng.random() < 0.3:
            prep = rng.choice(_PREP_KEYS)
            p_tags = PREPOSITIONS[prep][2]
            pobj = _sample_np(rng, p_tags, 0.15 if _takes_pronoun(p_tags) else 0.0)
        clause = Clause(subj, verb, obj, recipient, to_phrase, tense, prep, pobj, adverb)
        if not _clashes(clause):
            return clause


def sample_sentence(rng: random.Random) -> Sentence:
    """One random sentence structure (not yet length-filtered; see :func:`generate_pair`)."""
    r = rng.random()
    if r < 0.32:
        return Sentence(_sample_clause(rng, "main", adverb_p=0.35))
    if r < 0.42:
        return Sentence(_sample_clause(rng, "question"), question=True)
    if r < 0.66:
        main = _sample_clause(rng, "main", adverb_p=0.1, matrix=True)
        conj = rng.choice(VERBS[main.verb].tags.split(","))
        return Sentence(main, conj, _sample_clause(rng, "sub"))
    fronted = rng.random() < 0.4
    main = _sample_clause(rng, "inverted" if fronted else "main", adverb_p=0.1)
    return Sentence(main, rng.choice(ADVERBIAL_CONJ), _sample_clause(rng, "sub"), fronted)


def generate_pair(rng: random.Random) -> tuple[str, str]:
    """One random (english, german) pair with MIN_TOKENS..MAX_TOKENS tokens on both sides."""
    while True:
        en, de = render_sentence(sample_sentence(rng))
        if MIN_TOKENS <= en.count(" ") + 1 <= MAX_TOKENS and \
                MIN_TOKENS <= de.count(" ") + 1 <= MAX_TOKENS:
            return en, de


def detokenize(text: str) -> str:
    """Natural spacing for a rendered sentence: punctuation attached to the word before it
    ("Ich weiß , dass er schläft ." -> "Ich weiß, dass er schläft."). The TFDS dataset stores
    this form, so BLEU is computed on detokenized text as sacreBLEU expects."""
    return text.replace(" ,", ",").replace(" .", ".").replace(" ?", "?")


def build_corpus(seed: int = 0,
                 sizes: dict[str, int] | None = None) -> dict[str, list[tuple[str, str]]]:
    """The corpus as ``{split: [(english, german), ...]}``, deterministic in seed and sizes.

    Held-out splits (every split but ``train``, in sorted order) are generated first, each from
    its own seeded stream, so a test split does not change when the train size does. English
    sentences are distinct within and across splits: no held-out sentence occurs in train.
    Raises ValueError if a split cannot be filled with new distinct sentences in a bounded number
    of attempts (the grammar is too small for the sizes asked for).
    """
    return draw_splits(dict(SPLITS if sizes is None else sizes), f"corpus:{seed}",
                       lambda rng, name, drawn: generate_pair(rng))


def draw_splits(sizes: dict[str, int], stream: str,
                draw: Callable[[random.Random, str, int], tuple[str, str]]
                ) -> dict[str, list[tuple[str, str]]]:
    """``{split: [(english, german), ...]}`` of ``sizes``, each pair ``draw(rng, split,
    pairs drawn so far)``: held-out splits first (sorted), then train, each from its own
    stream seeded ``"{stream}:{split}"``; English sentences distinct within and across
    splits. ValueError if a split cannot be filled in 20 x its size + 1,000 attempts."""
    if any(n < 0 for n in sizes.values()):
        raise ValueError(f"split sizes must be non-negative: {sizes}")
    order = sorted(name for name in sizes if name != "train") + ["train"] * ("train" in sizes)
    seen: set[str] = set()
    out: dict[str, list[tuple[str, str]]] = {}
    for name in order:
        rng = random.Random(f"{stream}:{name}")
        pairs: list[tuple[str, str]] = []
        budget = 20 * sizes[name] + 1_000
        for _ in range(budget):
            if len(pairs) == sizes[name]:
                break
            en, de = draw(rng, name, len(pairs))
            if en not in seen:
                seen.add(en)
                pairs.append((en, de))
        if len(pairs) < sizes[name]:
            raise ValueError(f"split {name!r}: only {len(pairs)} of {sizes[name]} distinct new "
                             f"sentences after {budget} attempts; the grammar cannot produce "
                             "enough distinct sentences for these sizes")
        out[name] = pairs
    return {name: out[name] for name in sizes}
