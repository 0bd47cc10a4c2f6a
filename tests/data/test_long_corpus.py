"""The built-in corpus's long sentences (data/long_corpus.py): coordinated statements rendered
by hand, the builtin_long splits (train up to L words, test spread over buckets up to 3L),
and today's corpus left exactly as it was."""

import hashlib
import json
import random

import pytest

from transformer_jax.data import corpus, long_corpus
from transformer_jax.data.grammar import NP, Clause, Sentence
from transformer_jax.data.long_corpus import Coordinated, render_coordinated


def test_coordinated_statements_keep_each_parts_word_order():
    dog_sleeps = Sentence(Clause(NP("dog"), "sleep"))
    i_know = Sentence(Clause(NP(pronoun="I"), "know"), "that", Clause(NP("cat"), "sing"))
    seen = Sentence(Clause(NP("man"), "see", NP("bird"), tense="perfect", adverb="today"))
    assert render_coordinated(Coordinated((dog_sleeps, i_know, seen), ("and", "but"))) == (
        "The dog sleeps , and I know that the cat sings , but today the man has seen the "
        "bird .",
        "Der Hund schläft und ich weiß , dass die Katze singt , aber heute hat der Mann den "
        "Vogel gesehen .")
    with pytest.raises(ValueError, match="2 statements need 1 conjunctions"):
        render_coordinated(Coordinated((dog_sleeps, i_know), ()))


def test_the_long_corpus_trains_up_to_l_words_and_tests_up_to_3l():
    buckets = ((1, 12), (13, 18), (19, 24))
    c = long_corpus.build_long_corpus(seed=3, sizes={"train": 300, "validation": 30,
                                                     "test": 60},
                                      max_train_words=12, test_buckets=buckets)
    assert {k: len(v) for k, v in c.items()} == {"train": 300, "validation": 30, "test": 60}
    for split in ("train", "validation"):
        assert max(long_corpus.words(en) for en, _ in c[split]) <= 12
    lengths = [long_corpus.words(en) for en, _ in c["test"]]
    assert [sum(lo <= n <= hi for n in lengths) for lo, hi in buckets] == [20, 20, 20]
    english = [en for pairs in c.values() for en, _ in pairs]
    assert len(set(english)) == len(english)  # no test sentence was trained on
    assert any(", and" in en or ", but" in en for en, _ in c["train"])
    assert long_corpus.words("Der Hund schläft , weil die Katze singt .") == 7
    # Deterministic in its arguments.
    again = long_corpus.build_long_corpus(seed=3, sizes={"test": 60}, max_train_words=12,
                                          test_buckets=buckets)
    assert again["test"] == c["test"]


def test_todays_corpus_is_unchanged():
    # The SHA-256 of this corpus as commit f4a544e, the last before long sentences, generated
    # it, from a checkout of that commit (checked 2026-12-06):
    #   mkdir /tmp/at && git archive f4a544e | tar -x -C /tmp/at && cd /tmp/at && python -c \
    #   'import hashlib, json; from transformer_jax.data import corpus; print(hashlib.sha256(
    #   json.dumps(corpus.build_corpus(seed=0, sizes={"train": 2000, "validation": 100,
    #   "test": 100}), ensure_ascii=False).encode()).hexdigest())'
    small = corpus.build_corpus(seed=0, sizes={"train": 2000, "validation": 100, "test": 100})
    digest = hashlib.sha256(json.dumps(small, ensure_ascii=False).encode()).hexdigest()
    assert digest == "6851941f82f6fc3972e6c6e47cf726238df170427ed64247f06bb7f49e576393"


def test_a_length_the_grammar_hardly_makes_is_refused_not_searched_forever():
    with pytest.raises(ValueError, match="no sentence of 2 to 2 words in 10000 draws"):
        long_corpus.generate_long_pair(random.Random(0), 2, 2, coordinated=True)
