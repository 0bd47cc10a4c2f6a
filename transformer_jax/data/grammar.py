"""The built-in corpus's sentences as abstract structures (``Sentence`` -> ``Clause`` -> ``NP``)
and their rendering into English and German tokens, by the rules data/corpus.py describes."""

from __future__ import annotations

from typing import NamedTuple

from transformer_jax.data.lexicon import (
    ADJECTIVES,
    ADVERBS,
    AUX,
    COMPOUNDS,
    CONJUNCTIONS,
    CONTRACTIONS,
    DEF,
    EIN_ENDINGS,
    EIN_STEMS,
    NOUNS,
    PREPOSITIONS,
    PRONOUNS,
    VERBS,
    Noun,
    number_de,
    number_en,
)


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
        en_det, de_det = "the", DEF[case][g]
    else:
        en_det = "an" if det == "a" and en_rest[0][0] in "aeiou" else det
        de_det = EIN_STEMS[det] + EIN_ENDINGS[case][g]
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
        contracted = CONTRACTIONS.get((p_de, pd[0])) if c.pobj.det == "the" else None
        en_obj += [c.prep, *pe]
        mid += [contracted, *pd[1:]] if contracted else [p_de, *pd]
    third_sg = slot == 2
    # fin: German finite verb; rest: what goes to the end (participle or infinitive).
    if c.tense == "present":
        fin, rest, en_aux, en_lex = v.de[slot], [], "does" if third_sg else "do", v.en
        en_verbs = [v.en_3sg if third_sg else v.en]
    elif c.tense == "perfect":
        fin, rest = AUX[v.aux][slot], [v.de_part]
        en_aux, en_lex = "has" if third_sg else "have", v.en_part
        en_verbs = [en_aux, en_lex]
    else:  # modal verb with an infinitive
        fin, rest, en_aux, en_lex = AUX[c.tense][slot], [v.de[3]], c.tense, v.en
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
