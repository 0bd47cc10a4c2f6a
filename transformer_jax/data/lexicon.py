"""The built-in corpus's words: nouns, verbs, adjectives, pronouns, prepositions, adverbs,
conjunctions and numbers, each with its English forms and its German forms, gender and
case (data/corpus.py builds sentences from them)."""

from __future__ import annotations

from typing import NamedTuple


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
CONTRACTIONS = {("in", "dem"): "im", ("von", "dem"): "vom"}
# Fronted adverbs -> (German, tenses they combine with).
_TENSES, _NOT_PERFECT = ("present", "perfect", "can", "must"), ("present", "can", "must")
ADVERBS: dict[str, tuple[str, tuple[str, ...]]] = {
    "today": ("heute", _TENSES), "now": ("jetzt", _TENSES), "often": ("oft", _TENSES),
    "sometimes": ("manchmal", _TENSES), "usually": ("meistens", _TENSES), "here": ("hier", _TENSES),
    "tomorrow": ("morgen", _NOT_PERFECT), "suddenly": ("plötzlich", _NOT_PERFECT),
}
CONJUNCTIONS: dict[str, str] = {"that": "dass", "whether": "ob", "because": "weil", "if": "wenn",
                                "although": "obwohl", "while": "während"}
ADVERBIAL_CONJ = ("because", "if", "although", "while")
AUX = {"h": ("habe", "hast", "hat", "haben"), "s": ("bin", "bist", "ist", "sind"),
        "can": ("kann", "kannst", "kann", "können"), "must": ("muss", "musst", "muss", "müssen")}
DEF = {"nom": {"m": "der", "f": "die", "n": "das", "pl": "die"},
        "acc": {"m": "den", "f": "die", "n": "das", "pl": "die"},
        "dat": {"m": "dem", "f": "der", "n": "dem", "pl": "den"}}
EIN_ENDINGS = {"nom": {"m": "", "f": "e", "n": "", "pl": "e"},
                "acc": {"m": "en", "f": "e", "n": "", "pl": "e"},
                "dat": {"m": "em", "f": "er", "n": "em", "pl": "en"}}
EIN_STEMS = {"a": "ein", "my": "mein", "your": "dein", "our": "unser"}
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
