"""Specification of the built-in English -> German corpus (transformer_jax/data/corpus.py).

The first part pins exact, hand-written translations of one structure per phenomenon; the second
part checks properties of generated corpora (determinism, splits, frequencies, text form).
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Callable

import pytest

from transformer_jax.data import corpus, lexicon
from transformer_jax.data.grammar import NP, Clause, Sentence, render_sentence
from transformer_jax.data.lexicon import number_de, number_en

ME, YOU, HE, SHE = NP(pronoun="I"), NP(pronoun="you"), NP(pronoun="he"), NP(pronoun="she")
WE, THEY = NP(pronoun="we"), NP(pronoun="they")
DOG, CAT = NP("dog"), NP("cat")


def pl(noun: str, **kw) -> NP:
    return NP(noun, plural=True, **kw)


def check(sentence: Sentence | Clause, english: str, german: str) -> None:
    if isinstance(sentence, Clause):
        sentence = Sentence(sentence)
    assert render_sentence(sentence) == (english, german)


# --- word order ------------------------------------------------------------------------------

SUBORDINATE = [
    (Sentence(Clause(ME, "know"), "that", Clause(DOG, "see", CAT)),
     "I know that the dog sees the cat .", "Ich weiß , dass der Hund die Katze sieht ."),
    (Sentence(Clause(DOG, "sleep"), "because", Clause(CAT, "sing")),
     "The dog sleeps because the cat sings .", "Der Hund schläft , weil die Katze singt ."),
    (Sentence(Clause(SHE, "ask"), "whether", Clause(NP("man"), "see", DOG, tense="perfect")),
     "She asks whether the man has seen the dog .",
     "Sie fragt , ob der Mann den Hund gesehen hat ."),
    (Sentence(Clause(HE, "say"), "that", Clause(pl("child"), "read", NP("book"), tense="can")),
     "He says that the children can read the book .",
     "Er sagt , dass die Kinder das Buch lesen können ."),
    (Sentence(Clause(WE, "wait"), "although",
              Clause(NP("friend", det="my"), "come", tense="perfect")),
     "We wait although my friend has come .", "Wir warten , obwohl mein Freund gekommen ist ."),
    (Sentence(Clause(NP("teacher"), "say", tense="perfect"), "that", Clause(pl("bird"), "sing")),
     "The teacher has said that the birds sing .",
     "Der Lehrer hat gesagt , dass die Vögel singen ."),
    (Sentence(Clause(THEY, "hope"), "that",
              Clause(NP("woman"), "give", NP("book"), recipient=NP("child"), tense="must")),
     "They hope that the woman must give the child the book .",
     "Sie hoffen , dass die Frau dem Kind das Buch geben muss ."),
]


@pytest.mark.parametrize(("sentence", "english", "german"), SUBORDINATE)
def test_subordinate_clauses_put_the_finite_verb_last(sentence, english, german):
    check(sentence, english, german)


FRONTED = [
    (Sentence(Clause(CAT, "sing"), "if", Clause(DOG, "sleep"), fronted=True),
     "If the dog sleeps , the cat sings .", "Wenn der Hund schläft , singt die Katze ."),
    (Sentence(Clause(THEY, "help", NP("woman"), tense="perfect"), "while",
              Clause(ME, "sleep", tense="perfect"), fronted=True),
     "While I have slept , they have helped the woman .",
     "Während ich geschlafen habe , haben sie der Frau geholfen ."),
    (Clause(DOG, "see", CAT, adverb="today"),
     "Today the dog sees the cat .", "Heute sieht der Hund die Katze ."),
    (Clause(ME, "buy", NP("book"), tense="perfect", adverb="now"),
     "Now I have bought the book .", "Jetzt habe ich das Buch gekauft ."),
    (Clause(pl("woman"), "swim", tense="must", prep="in", pobj=NP("river"), adverb="tomorrow"),
     "Tomorrow the women must swim in the river .",
     "Morgen müssen die Frauen im Fluss schwimmen ."),
    (Sentence(Clause(ME, "ask", adverb="often"), "whether", Clause(DOG, "sleep")),
     "Often I ask whether the dog sleeps .", "Oft frage ich , ob der Hund schläft ."),
]


@pytest.mark.parametrize(("sentence", "english", "german"), FRONTED)
def test_fronted_adverb_or_clause_puts_the_verb_before_the_subject(sentence, english, german):
    check(sentence, english, german)


QUESTIONS = [
    (Clause(YOU, "see", CAT), "Do you see the cat ?", "Siehst du die Katze ?"),
    (Clause(HE, "read", NP("letter")), "Does he read the letter ?", "Liest er den Brief ?"),
    (Clause(DOG, "see", CAT, tense="perfect"),
     "Has the dog seen the cat ?", "Hat der Hund die Katze gesehen ?"),
    (Clause(DOG, "run", tense="perfect"), "Has the dog run ?", "Ist der Hund gelaufen ?"),
    (Clause(pl("cat"), "eat", NP("cake"), tense="can"),
     "Can the cats eat the cake ?", "Können die Katzen den Kuchen essen ?"),
]


@pytest.mark.parametrize(("clause", "english", "german"), QUESTIONS)
def test_questions_put_the_finite_verb_first(clause, english, german):
    check(Sentence(clause, question=True), english, german)


PERFECT = [
    (Clause(DOG, "see", CAT, tense="perfect"),
     "The dog has seen the cat .", "Der Hund hat die Katze gesehen ."),
    (Clause(pl("child"), "come", tense="perfect"),
     "The children have come .", "Die Kinder sind gekommen ."),
    (Clause(YOU, "follow", NP("king"), tense="perfect"),
     "You have followed the king .", "Du bist dem König gefolgt ."),
    (Clause(NP("man"), "give", NP("book"), recipient=NP("child"), tense="perfect"),
     "The man has given the child the book .", "Der Mann hat dem Kind das Buch gegeben ."),
    (Clause(NP("man"), "visit", NP("city"), tense="perfect", prep="with", pobj=NP("dog")),
     "The man has visited the city with the dog .",
     "Der Mann hat die Stadt mit dem Hund besucht ."),
    (Clause(SHE, "carry", NP("box"), tense="can", prep="from",
            pobj=NP("kitchen")),
     "She can carry the box from the kitchen .", "Sie kann die Kiste von der Küche tragen ."),
]


@pytest.mark.parametrize(("clause", "english", "german"), PERFECT)
def test_participle_and_infinitive_go_to_the_end(clause, english, german):
    check(clause, english, german)


# --- agreement -------------------------------------------------------------------------------

CASE = [
    (Clause(NP("man"), "see", DOG), "The man sees the dog .", "Der Mann sieht den Hund ."),
    (Clause(NP("girl"), "see", NP("horse")),
     "The girl sees the horse .", "Das Mädchen sieht das Pferd ."),
    (Clause(DOG, "help", NP("woman")), "The dog helps the woman .", "Der Hund hilft der Frau ."),
    (Clause(CAT, "thank", NP("child")), "The cat thanks the child .", "Die Katze dankt dem Kind ."),
    (Clause(pl("mouse"), "follow", pl("man")),
     "The mice follow the men .", "Die Mäuse folgen den Männern ."),
    (Clause(NP("woman"), "give", NP("book"), recipient=NP("child")),
     "The woman gives the child the book .", "Die Frau gibt dem Kind das Buch ."),
    (Clause(NP("woman"), "give", NP("book"), recipient=NP("child"), to_phrase=True),
     "The woman gives the book to the child .", "Die Frau gibt dem Kind das Buch ."),
    (Clause(DOG, "see", NP(pronoun="I")), "The dog sees me .", "Der Hund sieht mich ."),
    (Clause(NP("man"), "give", NP("key"), recipient=SHE),
     "The man gives her the key .", "Der Mann gibt ihr den Schlüssel ."),
    (Clause(DOG, "help", THEY), "The dog helps them .", "Der Hund hilft ihnen ."),
    (Clause(ME, "send", NP("letter"), recipient=YOU, to_phrase=True),
     "I send the letter to you .", "Ich schicke dir den Brief ."),
    (Clause(CAT, "sleep", prep="in", pobj=NP("garden")),
     "The cat sleeps in the garden .", "Die Katze schläft im Garten ."),
    (Clause(CAT, "sleep", prep="in", pobj=NP("kitchen")),
     "The cat sleeps in the kitchen .", "Die Katze schläft in der Küche ."),
    (Clause(DOG, "come", prep="from", pobj=NP("house")),
     "The dog comes from the house .", "Der Hund kommt vom Haus ."),
    (Clause(DOG, "play", prep="with", pobj=pl("child")),
     "The dog plays with the children .", "Der Hund spielt mit den Kindern ."),
    (Clause(NP("man"), "buy", NP("ball"), prep="for", pobj=DOG),
     "The man buys the ball for the dog .", "Der Mann kauft den Ball für den Hund ."),
    (Clause(HE, "dance", prep="without", pobj=SHE),
     "He dances without her .", "Er tanzt ohne sie ."),
    (Clause(HE, "dance", prep="with", pobj=SHE), "He dances with her .", "Er tanzt mit ihr ."),
    (Clause(pl("bird"), "sing", prep="under", pobj=pl("tree")),
     "The birds sing under the trees .", "Die Vögel singen unter den Bäumen ."),
]


@pytest.mark.parametrize(("clause", "english", "german"), CASE)
def test_gender_and_case_follow_verb_and_preposition(clause, english, german):
    check(clause, english, german)


ADJECTIVES = [
    (Clause(NP("dog", det="a", adjs=("big",)), "see", NP("cat", det="a", adjs=("small",))),
     "A big dog sees a small cat .", "Ein großer Hund sieht eine kleine Katze ."),
    (Clause(NP("man", adjs=("old",)), "see", NP("horse", adjs=("young",))),
     "The old man sees the young horse .", "Der alte Mann sieht das junge Pferd ."),
    (Clause(NP("child"), "see", NP("dog", det="a", adjs=("big",))),
     "The child sees a big dog .", "Das Kind sieht einen großen Hund ."),
    (Clause(NP("woman", det="a", adjs=("old",)), "buy", NP("house", det="a", adjs=("new",))),
     "An old woman buys a new house .", "Eine alte Frau kauft ein neues Haus ."),
    (Clause(NP("girl"), "play", prep="with", pobj=NP("man", adjs=("old",))),
     "The girl plays with the old man .", "Das Mädchen spielt mit dem alten Mann ."),
    (Clause(pl("dog", det="my", adjs=("big",)), "sleep"),
     "My big dogs sleep .", "Meine großen Hunde schlafen ."),
    (Clause(NP("dog", number=3, adjs=("big",)), "see", NP("cat", det="our", adjs=("small",))),
     "Three big dogs see our small cat .", "Drei große Hunde sehen unsere kleine Katze ."),
    (Clause(CAT, "play", prep="with", pobj=NP("dog", number=3, adjs=("big",))),
     "The cat plays with three big dogs .", "Die Katze spielt mit drei großen Hunden ."),
    (Clause(WE, "sleep", prep="in", pobj=NP("car", det="our", adjs=("old",))),
     "We sleep in our old car .", "Wir schlafen in unserem alten Auto ."),
    (Clause(NP("cat", det="your", adjs=("hungry",)), "eat", NP("egg", det="a")),
     "Your hungry cat eats an egg .", "Deine hungrige Katze isst ein Ei ."),
    (Clause(NP("horse", adjs=("beautiful", "big")), "sleep"),
     "The beautiful big horse sleeps .", "Das schöne große Pferd schläft ."),
]


@pytest.mark.parametrize(("clause", "english", "german"), ADJECTIVES)
def test_articles_and_adjective_endings_follow_gender_case_number(clause, english, german):
    check(clause, english, german)


@pytest.mark.parametrize(("pronoun", "english", "german"), [
    ("I", "I see the cat .", "Ich sehe die Katze ."),
    ("you", "You see the cat .", "Du siehst die Katze ."),
    ("he", "He sees the cat .", "Er sieht die Katze ."),
    ("she", "She sees the cat .", "Sie sieht die Katze ."),
    ("it", "It sees the cat .", "Es sieht die Katze ."),
    ("we", "We see the cat .", "Wir sehen die Katze ."),
    ("they", "They see the cat .", "Sie sehen die Katze ."),
])
def test_verb_agrees_with_pronoun_subject(pronoun, english, german):
    check(Clause(NP(pronoun=pronoun), "see", CAT), english, german)


@pytest.mark.parametrize(("clause", "english", "german"), [
    (Clause(ME, "come", tense="perfect"), "I have come .", "Ich bin gekommen ."),
    (Clause(YOU, "sleep", tense="perfect"), "You have slept .", "Du hast geschlafen ."),
    (Clause(YOU, "run"), "You run .", "Du läufst ."),
    (Clause(HE, "run"), "He runs .", "Er läuft ."),
    (Clause(YOU, "meet", DOG, tense="must"), "You must meet the dog .",
     "Du musst den Hund treffen ."),
    (Clause(NP("dog", also=CAT), "sleep"),
     "The dog and the cat sleep .", "Der Hund und die Katze schlafen ."),
    (Clause(pl("dog"), "see", pl("cat")),
     "The dogs see the cats .", "Die Hunde sehen die Katzen ."),
    (Clause(NP("dog", also=CAT), "come", tense="perfect"),
     "The dog and the cat have come .", "Der Hund und die Katze sind gekommen ."),
])
def test_subject_verb_agreement_and_plural(clause, english, german):
    check(clause, english, german)


# --- compounds -------------------------------------------------------------------------------

COMPOUNDS = [
    (Clause(ME, "open", NP("door", modifier="house")),
     "I open the house door .", "Ich öffne die Haustür ."),
    (Clause(ME, "find", NP("key", modifier="car")),
     "I find the car key .", "Ich finde den Autoschlüssel ."),
    (Clause(pl("bird"), "sleep", prep="in", pobj=pl("tree", modifier="apple")),
     "The birds sleep in the apple trees .", "Die Vögel schlafen in den Apfelbäumen ."),
    (Clause(NP("girl"), "read", pl("book", modifier="school")),
     "The girl reads the school books .", "Das Mädchen liest die Schulbücher ."),
    (Clause(NP("child"), "play", prep="in", pobj=NP("house", modifier="tree")),
     "The child plays in the tree house .", "Das Kind spielt im Baumhaus ."),
    (Clause(NP("man"), "need", NP("key", det="a", adjs=("big",), modifier="car")),
     "The man needs a big car key .", "Der Mann braucht einen großen Autoschlüssel ."),
    (Clause(SHE, "eat", NP("cake", det="a", modifier="apple")),
     "She eats an apple cake .", "Sie isst einen Apfelkuchen ."),
]


@pytest.mark.parametrize(("clause", "english", "german"), COMPOUNDS)
def test_noun_noun_sequences_become_one_german_word(clause, english, german):
    check(clause, english, german)


@pytest.mark.parametrize(("key", "german", "gender"), [
    (("house", "door"), "Haustür", "f"),
    (("car", "key"), "Autoschlüssel", "m"),
    (("tree", "house"), "Baumhaus", "n"),
    (("kitchen", "table"), "Küchentisch", "m"),
])
def test_compound_takes_the_gender_of_its_head(key, german, gender):
    noun = lexicon.COMPOUNDS[key]
    assert (noun.de, noun.gender) == (german, gender)


# --- numbers ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("n", "english", "german"), [
    (2, "two", "zwei"), (11, "eleven", "elf"), (16, "sixteen", "sechzehn"),
    (17, "seventeen", "siebzehn"), (20, "twenty", "zwanzig"), (21, "twenty-one", "einundzwanzig"),
    (30, "thirty", "dreißig"), (35, "thirty-five", "fünfunddreißig"),
    (66, "sixty-six", "sechsundsechzig"), (71, "seventy-one", "einundsiebzig"),
    (99, "ninety-nine", "neunundneunzig"),
])
def test_number_words(n, english, german):
    assert (number_en(n), number_de(n)) == (english, german)


@pytest.mark.parametrize("n", [-1, 100])
def test_numbers_outside_0_99_are_refused(n):
    with pytest.raises(ValueError):
        number_en(n)
    with pytest.raises(ValueError):
        number_de(n)


@pytest.mark.parametrize(("clause", "english", "german"), [
    (Clause(NP("dog", number=21), "sleep"),
     "Twenty-one dogs sleep .", "Einundzwanzig Hunde schlafen ."),
    (Clause(CAT, "see", NP("bird", number=35)),
     "The cat sees thirty-five birds .", "Die Katze sieht fünfunddreißig Vögel ."),
    (Clause(ME, "play", prep="with", pobj=NP("child", number=99)),
     "I play with ninety-nine children .", "Ich spiele mit neunundneunzig Kindern ."),
    (Clause(NP("dog", number=21, digits=True), "sleep"), "21 dogs sleep .", "21 Hunde schlafen ."),
])
def test_numbers_in_sentences(clause, english, german):
    check(clause, english, german)


# --- generated corpora -----------------------------------------------------------------------

SMALL = {"train": 3_000, "validation": 300, "test": 300}


@pytest.fixture(scope="module")
def small_corpus() -> dict[str, list[tuple[str, str]]]:
    return corpus.build_corpus(seed=0, sizes=SMALL)


@pytest.fixture(scope="module")
def sample() -> list[tuple[str, str]]:
    rng = random.Random(1234)
    return [corpus.generate_pair(rng) for _ in range(20_000)]


def test_default_sizes():
    assert corpus.SPLITS == {"train": 100_000, "validation": 1_000, "test": 1_000}


def test_sizes_none_means_default_splits(monkeypatch):
    monkeypatch.setattr(corpus, "SPLITS", {"train": 50, "validation": 10, "test": 10})
    built = corpus.build_corpus(seed=3)
    assert {name: len(pairs) for name, pairs in built.items()} == corpus.SPLITS


def test_split_sizes_are_exact(small_corpus):
    assert {name: len(pairs) for name, pairs in small_corpus.items()} == SMALL


def test_same_seed_gives_identical_corpus(small_corpus):
    assert corpus.build_corpus(seed=0, sizes=SMALL) == small_corpus


def test_different_seed_gives_different_corpus(small_corpus):
    other = corpus.build_corpus(seed=1, sizes=SMALL)
    for name in SMALL:
        assert other[name] != small_corpus[name]
    assert len(set(other["test"]) & set(small_corpus["test"])) < 30


def test_generate_pair_is_deterministic_in_the_rng():
    a, b = random.Random(7), random.Random(7)
    assert [corpus.generate_pair(a) for _ in range(200)] == [
        corpus.generate_pair(b) for _ in range(200)]


def test_held_out_splits_do_not_depend_on_train_size():
    small = corpus.build_corpus(seed=5, sizes={"train": 10, "validation": 50, "test": 50})
    large = corpus.build_corpus(seed=5, sizes={"train": 500, "validation": 50, "test": 50})
    assert small["test"] == large["test"] and small["validation"] == large["validation"]


def test_splits_hold_distinct_sentences_and_are_disjoint(small_corpus):
    english = {name: [en for en, _ in pairs] for name, pairs in small_corpus.items()}
    for name, sentences in english.items():
        assert len(set(sentences)) == len(sentences), name
    for a, b in itertools.combinations(english, 2):
        assert not set(english[a]) & set(english[b]), (a, b)


def test_grammar_too_small_raises_value_error(monkeypatch):
    pool = itertools.cycle([("A b c d .", "A b c d ."), ("E f g h .", "E f g h .")])
    monkeypatch.setattr(corpus, "generate_pair", lambda rng: next(pool))
    with pytest.raises(ValueError, match="distinct"):
        corpus.build_corpus(seed=0, sizes={"train": 1, "test": 3})


def test_negative_size_is_refused():
    with pytest.raises(ValueError):
        corpus.build_corpus(sizes={"train": -1})


def test_translation_is_a_function_of_the_english_sentence(sample, small_corpus):
    translation: dict[str, str] = {}
    for en, de in itertools.chain(sample, *small_corpus.values()):
        assert translation.setdefault(en, de) == de, en


def test_sentence_lengths(sample):
    for en, de in sample:
        assert corpus.MIN_TOKENS <= len(en.split()) <= corpus.MAX_TOKENS, en
        assert corpus.MIN_TOKENS <= len(de.split()) <= corpus.MAX_TOKENS, de
    mean = sum(len(en.split()) for en, _ in sample) / len(sample)
    assert 7 <= mean <= 16


def test_text_form(sample):
    german_nouns = {form.lower() for n in [*lexicon.NOUNS.values(), *lexicon.COMPOUNDS.values()]
                    for form in (n.de, n.de_pl)}
    for en, de in sample:
        assert en.isascii(), en
        assert de.encode("utf-8").decode("utf-8") == de
        for text in (en, de):
            assert text == " ".join(text.split()), "tokens are separated by single spaces"
            assert text[0].isupper() or text[0].isdigit(), text
            assert text.endswith((" .", " ?")), text
            assert re.fullmatch(r"[^.?,]+( , [^.?,]+)* [.?]", text), text
        rest = en.split()[1:]
        assert all(t in ("I", ",", ".", "?") or t.islower() or t.isdigit() for t in rest), en
        assert not german_nouns & set(de.split()), f"German nouns are capitalised: {de}"


def test_german_side_uses_umlauts_and_sharp_s(sample):
    german = " ".join(de for _, de in sample)
    for char in "äöüß":
        assert char in german, char


def test_vocabulary_is_modest(sample):
    # Lower-cased, hyphenated numbers split, digits left out: the word types a learner meets.
    words = {part for en, _ in sample for tok in en.lower().split() for part in tok.split("-")}
    words = {w for w in words if not w.isdigit()}
    assert 150 <= len(words) <= 320


def _has(*words: str) -> Callable[[str], bool]:
    pattern = re.compile(r"(?:^| )(?:" + "|".join(map(re.escape, words)) + r")(?= |$)", re.I)
    return lambda text: pattern.search(text) is not None


_PLURALS = [n.en_pl for n in lexicon.NOUNS.values()]
_NUMBER_WORDS = [number_en(n) for n in range(2, 100)]
_COMPOUND_WORDS = [c.de for c in lexicon.COMPOUNDS.values()] + [
    c.de_pl for c in lexicon.COMPOUNDS.values()]
PHENOMENA: list[tuple[str, str, Callable[[str], bool], float]] = [
    ("subordinate clause", "en", _has("that", "whether", "because", "if", "although", "while"),
     0.25),
    ("verb-final clause", "de", _has("dass", "ob", "weil", "wenn", "obwohl", "während"), 0.25),
    ("fronted subordinate clause", "en", re.compile(
        r"^(If|Because|Although|While) ").match, 0.05),
    ("V2 after fronted adverb", "en", lambda s: s.split()[0].lower() in lexicon.ADVERBS, 0.05),
    ("question", "en", lambda s: s.endswith("?"), 0.05),
    ("perfect", "en", _has("has", "have"), 0.15),
    ("perfect with sein", "de", _has("bin", "bist", "ist", "sind"), 0.03),
    ("modal", "en", _has("can", "must"), 0.05),
    ("dative verb", "en", _has(*[f for v in ("help", "thank", "follow")
                                 for f in (v, v + "s", v + "ed")]), 0.03),
    ("ditransitive", "de", _has(*[f for v in ("give", "show", "bring", "send")
                                  for f in lexicon.VERBS[v].de]), 0.05),
    ("preposition", "en", _has(*lexicon.PREPOSITIONS), 0.15),
    ("contraction im/vom", "de", _has("im", "vom"), 0.02),
    ("adjective", "en", _has(*lexicon.ADJECTIVES), 0.2),
    ("plural noun", "en", _has(*_PLURALS), 0.2),
    ("coordinated subject", "en", _has("and"), 0.02),
    ("pronoun", "en", _has("I", "you", "he", "she", "it", "we", "they"), 0.2),
    ("compound", "de", lambda s: any(w in _COMPOUND_WORDS for w in s.split()), 0.05),
    ("number word", "en", _has(*_NUMBER_WORDS), 0.1),
    ("ones-before-tens number", "de", re.compile(r"\b\w+und\w+(zig|ßig)\b").search, 0.05),
    ("digits", "en", re.compile(r"\b\d+\b").search, 0.005),
]


@pytest.mark.parametrize(("side", "has", "minimum"), [p[1:] for p in PHENOMENA],
                         ids=[p[0] for p in PHENOMENA])
def test_phenomenon_occurs_often_enough(sample, side, has, minimum):
    texts = [en if side == "en" else de for en, de in sample]
    assert sum(1 for t in texts if has(t)) / len(texts) >= minimum


def test_detokenize_attaches_punctuation():
    assert corpus.detokenize("Ich weiß , dass der Hund schläft .") == \
        "Ich weiß, dass der Hund schläft."
    assert corpus.detokenize("Hat der Freund gesungen ?") == "Hat der Freund gesungen?"
    for en, de in corpus.build_corpus(seed=0, sizes={"test": 50})["test"]:
        for text in (corpus.detokenize(en), corpus.detokenize(de)):
            assert text[-1] in ".?" and text[-2] != " " and " ," not in text
