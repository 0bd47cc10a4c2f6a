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
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from typing import NamedTuple

SPLITS: dict[str, int] = {"train": 100_000, "validation": 1_000, "test": 1_000}
"""Default split sizes (number of sentence pairs) used by :func:`build_corpus`."""

MIN_TOKENS, MAX_TOKENS = 4, 25
"""Both sides of every generated pair have this many whitespace tokens (inclusive)."""


class Noun(NamedTuple):
    """A noun in both languages; ``tags`` say which slots it may fill (see ``_NOUN_TABLE``)."""

    en: str
    en_pl: str
    de: str
    de_pl: str
    gender: str  # 'm', 'f' or 'n'
    tags: str

    @property
    def animate(self) -> bool:
        return "a" in self.tags


# Tags: a animate, c portable, g buyable goods, r readable, o openable, e edible, b buildable,
# p place (in / from), s surface (on / under), l landmark (behind / near).
_NOUN_TABLE = """
dog dogs Hund Hunde m a|cat cats Katze Katzen f a|bird birds Vogel Vögel m a
horse horses Pferd Pferde n a|mouse mice Maus Mäuse f a|cow cows Kuh Kühe f a
man men Mann Männer m a|woman women Frau Frauen f a|child children Kind Kinder n a
girl girls Mädchen Mädchen n a|teacher teachers Lehrer Lehrer m a|doctor doctors Arzt Ärzte m a
friend friends Freund Freunde m a|brother brothers Bruder Brüder m a
sister sisters Schwester Schwestern f a|mother mothers Mutter Mütter f a
father fathers Vater Väter m a|king kings König Könige m a|cook cooks Koch Köche m a
house houses Haus Häuser n pgbl|car cars Auto Autos n pgl|book books Buch Bücher n cgro
ball balls Ball Bälle m cg|door doors Tür Türen f ol|key keys Schlüssel Schlüssel m cg
table tables Tisch Tische m sbgl|chair chairs Stuhl Stühle m sbcg|apple apples Apfel Äpfel m cge
cake cakes Kuchen Kuchen m cge|egg eggs Ei Eier n cge|letter letters Brief Briefe m cro
garden gardens Garten Gärten m pl|school schools Schule Schulen f pl
window windows Fenster Fenster n ol|cup cups Tasse Tassen f cg|tree trees Baum Bäume m sl
flower flowers Blume Blumen f cg|bed beds Bett Betten n sbg|bag bags Tasche Taschen f cgo
city cities Stadt Städte f p|boat boats Boot Boote n psbg|train trains Zug Züge m p
bike bikes Fahrrad Fahrräder n gl|bottle bottles Flasche Flaschen f cgo
box boxes Kiste Kisten f cgosb|hat hats Hut Hüte m cg|kitchen kitchens Küche Küchen f p
room rooms Zimmer Zimmer n p|bridge bridges Brücke Brücken f slb
village villages Dorf Dörfer n p|river rivers Fluss Flüsse m p
"""
NOUNS: dict[str, Noun] = {
    fields[0]: Noun(*fields)
    for entry in _NOUN_TABLE.replace("\n", "|").split("|")
    if (fields := entry.split())
}

# modifier:German combining form, then the heads it combines with. Only this whitelist exists,
# so an English noun-noun sequence always names one compound (and never two noun phrases).
_COMPOUND_TABLE = """
house:Haus door key|car:Auto key door window|kitchen:Küchen table door window chair
garden:Garten door table chair house|school:Schul book bag garden door|apple:Apfel tree cake box
door:Tür key|bike:Fahrrad key|room:Zimmer door key|flower:Blumen garden box|tree:Baum house
train:Zug door window
"""


def _compounds() -> dict[tuple[str, str], Noun]:
    table = {}
    for entry in _COMPOUND_TABLE.replace("\n", "|").split("|"):
        if not entry.strip():
            continue
        head_spec, *heads = entry.split()
        mod, form = head_spec.split(":")
        for head in heads:
            h = NOUNS[head]
            # The compound takes gender, plural and tags from its head noun.
            table[mod, head] = Noun(f"{mod} {h.en}", f"{mod} {h.en_pl}", form + h.de.lower(),
                                    form + h.de_pl.lower(), h.gender, h.tags)
    return table


COMPOUNDS: dict[tuple[str, str], Noun] = _compounds()


class Verb(NamedTuple):
    """A verb: English base / 3sg / participle, German present (1sg, 2sg, 3sg, plural)."""

    kind: str  # intr | acc | dat | ditr | matrix
    en: str
    en_3sg: str
    en_part: str
    de: tuple[str, str, str, str]
    de_part: str
    aux: str  # 'h' (haben) or 's' (sein)
    tags: str  # object tags (theme for ditr); conjunctions for matrix verbs


# kind | English base, 3sg, participle | German ich, du, er/sie/es, wir/sie (= infinitive),
# participle, perfect auxiliary | object tags (theme for ditr), or conjunctions for matrix verbs.
_VERB_TABLE = """
acc see sees seen sehe siehst sieht sehen gesehen h *
acc hear hears heard höre hörst hört hören gehört h a
acc love loves loved liebe liebst liebt lieben geliebt h a
acc find finds found finde findest findet finden gefunden h ac
acc visit visits visited besuche besuchst besucht besuchen besucht h ap
acc meet meets met treffe triffst trifft treffen getroffen h a
acc wash washes washed wasche wäschst wäscht waschen gewaschen h ag
acc buy buys bought kaufe kaufst kauft kaufen gekauft h g
acc need needs needed brauche brauchst braucht brauchen gebraucht h g
acc carry carries carried trage trägst trägt tragen getragen h c
acc read reads read lese liest liest lesen gelesen h r
acc open opens opened öffne öffnest öffnet öffnen geöffnet h o
acc eat eats eaten esse isst isst essen gegessen h e
acc build builds built baue baust baut bauen gebaut h b
dat help helps helped helfe hilfst hilft helfen geholfen h a
dat thank thanks thanked danke dankst dankt danken gedankt h a
dat follow follows followed folge folgst folgt folgen gefolgt s a
ditr give gives given gebe gibst gibt geben gegeben h c
ditr show shows shown zeige zeigst zeigt zeigen gezeigt h c
ditr bring brings brought bringe bringst bringt bringen gebracht h c
ditr send sends sent schicke schickst schickt schicken geschickt h c
intr sleep sleeps slept schlafe schläfst schläft schlafen geschlafen h -
intr run runs run laufe läufst läuft laufen gelaufen s -
intr come comes come komme kommst kommt kommen gekommen s -
intr sing sings sung singe singst singt singen gesungen h -
intr wait waits waited warte wartest wartet warten gewartet h -
intr play plays played spiele spielst spielt spielen gespielt h -
intr swim swims swum schwimme schwimmst schwimmt schwimmen geschwommen s -
intr dance dances danced tanze tanzt tanzt tanzen getanzt h -
matrix know knows known weiß weißt weiß wissen gewusst h that,whether
matrix think thinks thought denke denkst denkt denken gedacht h that
matrix say says said sage sagst sagt sagen gesagt h that
matrix believe believes believed glaube glaubst glaubt glauben geglaubt h that
matrix hope hopes hoped hoffe hoffst hofft hoffen gehofft h that
matrix ask asks asked frage fragst fragt fragen gefragt h whether
"""
VERBS: dict[str, Verb] = {
    f[1]: Verb(f[0], f[1], f[2], f[3], (f[4], f[5], f[6], f[7]), f[8], f[9], f[10])
    for entry in _VERB_TABLE.replace("\n", "|").split("|")
    if (f := entry.split())
}

# English adjective -> (German stem, English ordering rank, 'a' animate-only / 't' things-only).
ADJECTIVES: dict[str, tuple[str, int, str]] = {
    "beautiful": ("schön", 0, "*"), "tired": ("müd", 2, "a"), "hungry": ("hungrig", 2, "a"),
    "happy": ("glücklich", 2, "a"), "big": ("groß", 1, "*"), "small": ("klein", 1, "*"),
    "heavy": ("schwer", 2, "t"), "fast": ("schnell", 2, "*"), "old": ("alt", 3, "*"),
    "young": ("jung", 3, "a"), "new": ("neu", 3, "t"), "red": ("rot", 4, "t"),
    "green": ("grün", 4, "t"), "black": ("schwarz", 4, "*"), "white": ("weiß", 4, "*"),
}


class Pronoun(NamedTuple):
    """A personal pronoun: English object form, German nominative/accusative/dative forms."""

    en_obj: str
    nom: str
    acc: str
    dat: str
    slot: int  # agreement slot: 0 = 1sg, 1 = 2sg, 2 = 3sg, 3 = plural


PRONOUNS: dict[str, Pronoun] = {
    "I": Pronoun("me", "ich", "mich", "mir", 0), "you": Pronoun("you", "du", "dich", "dir", 1),
    "he": Pronoun("him", "er", "ihn", "ihm", 2), "she": Pronoun("her", "sie", "sie", "ihr", 2),
    "it": Pronoun("it", "es", "es", "ihm", 2), "we": Pronoun("us", "wir", "uns", "uns", 3),
    "they": Pronoun("them", "sie", "sie", "ihnen", 3),
}
# English preposition -> (German, case it governs, tags of the nouns it takes).
PREPOSITIONS: dict[str, tuple[str, str, str]] = {
    "with": ("mit", "dat", "ac"), "from": ("von", "dat", "ap"), "in": ("in", "dat", "p"),
    "on": ("auf", "dat", "s"), "under": ("unter", "dat", "s"), "behind": ("hinter", "dat", "l"),
    "near": ("neben", "dat", "l"), "for": ("für", "acc", "a"), "without": ("ohne", "acc", "ac"),
}
_CONTRACTIONS = {("in", "dem"): "im", ("von", "dem"): "vom"}
# Fronted adverbs -> (German, tenses they combine with).
_TENSES, _NOT_PERFECT = ("present", "perfect", "can", "must"), ("present", "can", "must")
ADVERBS: dict[str, tuple[str, tuple[str, ...]]] = {
    "today": ("heute", _TENSES), "now": ("jetzt", _TENSES), "often": ("oft", _TENSES),
    "sometimes": ("manchmal", _TENSES), "usually": ("meistens", _TENSES), "here": ("hier", _TENSES),
    "tomorrow": ("morgen", _NOT_PERFECT), "suddenly": ("plötzlich", _NOT_PERFECT),
}
CONJUNCTIONS: dict[str, str] = {"that": "dass", "whether": "ob", "because": "weil", "if": "wenn",
                                "although": "obwohl", "while": "während"}
_ADVERBIAL_CONJ = ("because", "if", "although", "while")
_AUX = {"h": ("habe", "hast", "hat", "haben"), "s": ("bin", "bist", "ist", "sind"),
        "can": ("kann", "kannst", "kann", "können"), "must": ("muss", "musst", "muss", "müssen")}
_DEF = {"nom": {"m": "der", "f": "die", "n": "das", "pl": "die"},
        "acc": {"m": "den", "f": "die", "n": "das", "pl": "die"},
        "dat": {"m": "dem", "f": "der", "n": "dem", "pl": "den"}}
_EIN_ENDINGS = {"nom": {"m": "", "f": "e", "n": "", "pl": "e"},
                "acc": {"m": "en", "f": "e", "n": "", "pl": "e"},
                "dat": {"m": "em", "f": "er", "n": "em", "pl": "en"}}
_EIN_STEMS = {"a": "ein", "my": "mein", "your": "dein", "our": "unser"}
_NUMBER_WORDS = """
zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen
sixteen seventeen eighteen nineteen|_ _ twenty thirty forty fifty sixty seventy eighty ninety|
null eins zwei drei vier fünf sechs sieben acht neun zehn elf zwölf dreizehn vierzehn fünfzehn
sechzehn siebzehn achtzehn neunzehn|_ _ zwanzig dreißig vierzig fünfzig sechzig siebzig achtzig
neunzig"""
_EN_ONES, _EN_TENS, _DE_ONES, _DE_TENS = (w.split() for w in _NUMBER_WORDS.split("|"))


def number_en(n: int) -> str:
    """English cardinal for 0 <= n <= 99, hyphenated above twenty ("twenty-one")."""
    if not 0 <= n <= 99:
        raise ValueError(f"number out of range 0..99: {n}")
    tens, ones = divmod(n, 10)
    if n < 20:
        return _EN_ONES[n]
    return _EN_TENS[tens] + (f"-{_EN_ONES[ones]}" if ones else "")


def number_de(n: int) -> str:
    """German cardinal for 0 <= n <= 99, ones before tens ("einundzwanzig")."""
    if not 0 <= n <= 99:
        raise ValueError(f"number out of range 0..99: {n}")
    tens, ones = divmod(n, 10)
    if n < 20:
        return _DE_ONES[n]
    if not ones:
        return _DE_TENS[tens]
    return ("ein" if ones == 1 else _DE_ONES[ones]) + "und" + _DE_TENS[tens]


class NP(NamedTuple):
    """A noun phrase: a pronoun, or determiner + adjectives + noun (or compound).

    ``noun`` is an English singular from ``NOUNS`` (the head when ``modifier`` names a compound),
    ``det`` one of the/a/my/your/our, ignored when ``number`` > 0 (the number is the determiner
    and the phrase is plural). ``also`` coordinates a second noun phrase ("the dog and the cat").
    """

    noun: str = ""
    det: str = "the"
    plural: bool = False
    adjs: tuple[str, ...] = ()
    modifier: str = ""
    number: int = 0
    digits: bool = False
    pronoun: str = ""
    also: NP | None = None


class Clause(NamedTuple):
    """One clause. ``obj`` is the accusative object (dative for help/thank/follow, the theme for
    give/show/bring/send); ``recipient`` is the dative object of ditransitives, in English
    before the theme or, with ``to_phrase``, after it as "to ...". ``tense`` is present, perfect,
    can or must; ``adverb`` is a fronted adverb (main clauses only)."""

    subj: NP
    verb: str
    obj: NP | None = None
    recipient: NP | None = None
    to_phrase: bool = False
    tense: str = "present"
    prep: str = ""
    pobj: NP | None = None
    adverb: str = ""


class Sentence(NamedTuple):
    """A main clause, optionally with a subordinate clause introduced by ``conj`` (a key of
    ``CONJUNCTIONS``), which comes first when ``fronted``; or a yes/no question."""

    main: Clause
    conj: str = ""
    sub: Clause | None = None
    fronted: bool = False
    question: bool = False


def _noun(np: NP) -> Noun:
    return COMPOUNDS[np.modifier, np.noun] if np.modifier else NOUNS[np.noun]


def _adj_ending(det: str, case: str, g: str) -> str:
    if det == "num":  # strong declension: no article carries the case
        return "en" if case == "dat" else "e"
    if g == "pl" or case == "dat" or (case == "acc" and g == "m"):
        return "en"
    if det != "the" and g != "f":  # ein-words lack an ending here, so the adjective shows it
        return "er" if g == "m" else "es"
    return "e"


def render_np(np: NP, case: str) -> tuple[list[str], list[str]]:
    """English and German tokens of a noun phrase in ``case`` (nom, acc or dat)."""
    if np.pronoun:
        p = PRONOUNS[np.pronoun]
        return [np.pronoun if case == "nom" else p.en_obj], [getattr(p, case)]
    noun = _noun(np)
    plural = np.plural or np.number > 0
    g = "pl" if plural else noun.gender
    det = "num" if np.number else np.det
    if plural and det == "a":
        raise ValueError(f"'a' needs a singular noun: {np}")
    de_noun = noun.de_pl if plural else noun.de
    if plural and case == "dat" and not de_noun.endswith(("n", "s")):
        de_noun += "n"
    en_rest = [*np.adjs, *(noun.en_pl if plural else noun.en).split()]
    if det == "num":
        en_det = de_det = str(np.number)
        if not np.digits:
            en_det, de_det = number_en(np.number), number_de(np.number)
    elif det == "the":
        en_det, de_det = "the", _DEF[case][g]
    else:
        en_det = "an" if det == "a" and en_rest[0][0] in "aeiou" else det
        de_det = _EIN_STEMS[det] + _EIN_ENDINGS[case][g]
    de_adjs = [ADJECTIVES[a][0] + _adj_ending(det, case, g) for a in np.adjs]
    en, de = [en_det, *en_rest], [de_det, *de_adjs, de_noun]
    if np.also:
        en2, de2 = render_np(np.also, case)
        en, de = [*en, "and", *en2], [*de, "und", *de2]
    return en, de


def _slot(np: NP) -> int:
    if np.pronoun:
        return PRONOUNS[np.pronoun].slot
    return 3 if np.plural or np.number or np.also else 2


def render_clause(c: Clause, order: str = "main") -> tuple[list[str], list[str]]:
    """English and German tokens of a clause, without final punctuation.

    ``order`` is the German word order: ``main`` (verb second; verb before the subject after a
    fronted adverb), ``question`` (verb first, English do-support), ``inverted`` (verb first,
    used after a fronted subordinate clause) or ``sub`` (verb last).
    """
    v = VERBS[c.verb]
    slot = _slot(c.subj)
    s_en, s_de = render_np(c.subj, "nom")
    en_obj: list[str] = []
    mid: list[str] = []  # German middle field: dative, accusative, prepositional phrase
    if c.recipient:
        r_en, r_de = render_np(c.recipient, "dat")
        mid += r_de
    if c.obj:
        o_en, o_de = render_np(c.obj, "dat" if v.kind == "dat" else "acc")
        mid += o_de
        en_obj = o_en
        if c.recipient:
            en_obj = [*o_en, "to", *r_en] if c.to_phrase else [*r_en, *o_en]
    if c.prep:
        p_de, p_case, _ = PREPOSITIONS[c.prep]
        pe, pd = render_np(c.pobj, p_case)
        contracted = _CONTRACTIONS.get((p_de, pd[0])) if c.pobj.det == "the" else None
        en_obj += [c.prep, *pe]
        mid += [contracted, *pd[1:]] if contracted else [p_de, *pd]
    third_sg = slot == 2
    # fin: German finite verb; rest: what goes to the end (participle or infinitive).
    if c.tense == "present":
        fin, rest, en_aux, en_lex = v.de[slot], [], "does" if third_sg else "do", v.en
        en_verbs = [v.en_3sg if third_sg else v.en]
    elif c.tense == "perfect":
        fin, rest = _AUX[v.aux][slot], [v.de_part]
        en_aux, en_lex = "has" if third_sg else "have", v.en_part
        en_verbs = [en_aux, en_lex]
    else:  # modal verb with an infinitive
        fin, rest, en_aux, en_lex = _AUX[c.tense][slot], [v.de[3]], c.tense, v.en
        en_verbs = [en_aux, en_lex]
    adverb = c.adverb if order == "main" else ""
    if order == "question":
        en = [en_aux, *s_en, en_lex, *en_obj]
    else:
        en = [*([adverb] if adverb else []), *s_en, *en_verbs, *en_obj]
    if order == "sub":
        de = [*s_de, *mid, *rest, fin]
    elif order in ("question", "inverted"):
        de = [fin, *s_de, *mid, *rest]
    elif adverb:
        de = [ADVERBS[adverb][0], fin, *s_de, *mid, *rest]
    else:
        de = [*s_de, fin, *mid, *rest]
    return en, de


def finish(tokens: list[str], end: str) -> str:
    """Tokens as a sentence: the first capitalised, ``end`` (punctuation) appended."""
    first = tokens[0]
    return " ".join([first[0].upper() + first[1:], *tokens[1:], end])


def render_sentence(s: Sentence) -> tuple[str, str]:
    """The (english, german) strings of a sentence structure."""
    en, de = render_tokens(s)
    end = "?" if s.question else "."
    return finish(en, end), finish(de, end)


def render_tokens(s: Sentence) -> tuple[list[str], list[str]]:
    """The English and German tokens of a sentence structure, lower case where the words
    are (German nouns and English "I" keep their capitals), without final punctuation."""
    if s.sub is None:
        en, de = render_clause(s.main, "question" if s.question else "main")
    else:
        sub_en, sub_de = render_clause(s.sub, "sub")
        de_conj = CONJUNCTIONS[s.conj]
        if s.fronted:
            # The whole subordinate clause fills the first position, so the main verb follows.
            main_en, main_de = render_clause(s.main, "inverted")
            en = [s.conj, *sub_en, ",", *main_en]
            de = [de_conj, *sub_de, ",", *main_de]
        else:
            main_en, main_de = render_clause(s.main, "main")
            en = [*main_en, s.conj, *sub_en]
            de = [*main_de, ",", de_conj, *sub_de]
    return en, de


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
    return Sentence(main, rng.choice(_ADVERBIAL_CONJ), _sample_clause(rng, "sub"), fronted)


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
