"""Vocabulary and a seeded English sentence generator for the built-in corpus.

Every word the generator can emit (after `normalize_text`) is in `VOCABULARY`, and every word
of `VOCABULARY` is in pocketsphinx's bundled CMU dictionary (asserted by tests/test_text.py),
so an ASR evaluator can in principle recognise all of it.

The grammar covers declaratives in several tenses (simple past/present, progressive, perfect,
future, modals), copular sentences, existentials, comparatives, yes/no and wh-questions,
imperatives, exclamations, reported speech, relative clauses, subordinate clauses (because,
although, when, while, if, after, before, until, since, unless) and coordination (and, but,
so, or). Noun phrases take determiners, numbers, adjectives, intensifiers and prepositional
phrases; subjects agree with their verbs. Some sentences contain digits, money, times, dates,
years, percentages, ordinals and titles (Dr., Mr., Mrs.) to exercise the text normaliser.

`generate_sentences(n, seed)` is deterministic in `seed` (Python's `random.Random`, whose
`random()`/`choice()` streams are stable across Python 3 versions) and returns `n` sentences
with distinct normalised text, each 3..20 words long after normalisation.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from jaxtts.data.text import normalize_text, number_to_words, ordinal_to_words

__all__ = [
    "MAX_WORDS",
    "MIN_WORDS",
    "VOCABULARY",
    "SentenceGenerator",
    "generate_sentences",
]

MIN_WORDS = 3
MAX_WORDS = 20

# ----------------------------------------------------------------------------- nouns
# "singular" or "singular/plural" (irregular plural); "-" as plural = uncountable.


def _plural(word: str) -> str:
    if word.endswith(("s", "x", "z", "ch", "sh")):
        return word + "es"
    if word.endswith("y") and word[-2] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


def _nouns(spec: str) -> list[tuple[str, str | None]]:
    out = []
    for item in spec.split():
        sing, _, plur = item.partition("/")
        out.append((sing, None if plur == "-" else (plur or _plural(sing))))
    return out


PEOPLE = _nouns(
    "teacher doctor farmer driver student child/children friend neighbor nurse baker painter "
    "writer singer player worker captain soldier pilot sister brother mother father uncle aunt "
    "cousin girl boy man/men woman/women baby king queen guard lawyer artist cook waiter "
    "stranger visitor manager officer engineer scientist daughter son wife/wives husband "
    "grandmother grandfather gardener fisherman/fishermen sailor dancer musician poet judge "
    "actor author pupil boss customer guest hunter merchant nephew niece prince princess "
    "tourist traveler clerk coach"
)
ANIMALS = _nouns(
    "dog cat bird horse cow sheep/sheep fish/fish rabbit fox wolf/wolves bear duck goat "
    "mouse/mice lion tiger snake frog chicken pig deer/deer owl bee monkey turtle whale eagle "
    "donkey puppy kitten elephant squirrel"
)
THINGS = _nouns(
    "book box bag cup key letter ball bottle basket coat hat shoe chair table lamp clock phone "
    "map pen pencil ticket picture blanket bucket candle coin knife/knives plate spoon fork "
    "glass brush rope ring watch wallet umbrella jacket shirt camera radio ladder hammer "
    "newspaper card gift toy kite guitar piano mirror pillow bowl jar basket door window gate "
    "fence shelf/shelves desk bed sofa drawer envelope note sign poster flag bell drum violin "
    "scarf glove sock boot belt dress button necklace tent sack"
)
FOOD = _nouns(
    "apple bread/- cake soup/- cheese/- egg orange banana cookie sandwich potato/potatoes "
    "tomato/tomatoes carrot pie rice/- salad pizza meat/- butter/- honey/- lemon peach pear "
    "onion cherry grape"
)
DRINKS = _nouns("water/- tea/- coffee/- milk/- juice/- lemonade/-")
PLACES = _nouns(
    "park house school city town village river lake forest garden kitchen market station "
    "library hospital church beach road street bridge field farm hill mountain island office "
    "store shop museum restaurant hotel room yard corner airport castle harbor valley desert "
    "cave tower theater bakery classroom hallway bank factory prison palace cottage barn "
    "stadium zoo playground cafe square"
)
VEHICLES = _nouns("car bus train boat ship truck plane taxi bicycle wagon")
TEXTS = _nouns("book letter story note message newspaper poem map sign report list recipe")
SONGS = _nouns("song tune melody")
TELLABLES = _nouns("story joke secret lie")
GAMES = _nouns("game match")
ABSTRACT = _nouns(
    "idea question answer problem plan reason lesson dream mistake promise word name rule "
    "choice chance job voice noise music/- news/- advice/- decision"
)
NATURE = _nouns(
    "sun moon star sky rain/- snow/- wind tree flower grass/- stone rock leaf/leaves cloud "
    "storm sea ocean wave fire light shadow ice/-"
)
MEALS = "breakfast lunch dinner supper".split()
TIMES_OF_DAY = "morning afternoon evening night".split()
DAYS = "monday tuesday wednesday thursday friday saturday sunday".split()
MONTHS = (
    "january february march april may june july august september october november december"
).split()
SEASONS = "spring summer autumn winter".split()
DURATIONS = _nouns("minute hour day week month year")
FIRST_NAMES = (
    "john mary david sarah peter anna tom emma james lucy robert linda michael susan paul kate "
    "daniel laura mark alice henry helen george grace frank rose jack ellen sam nina"
).split()
SURNAMES = (
    "smith brown green white baker miller taylor clark wood hill young king carter walker "
    "turner parker cooper ward moore lewis hall allen scott adams"
).split()
TITLES = ("Dr.", "Mr.", "Mrs.", "Ms.", "Professor", "Captain")

# ----------------------------------------------------------------------------- verbs
# "base" (regular), "base+" (doubles its final consonant), or "base/past/participle".


def _verb_forms(spec: str) -> dict[str, str]:
    base, *irr = spec.split("/")
    double = base.endswith("+")
    base = base.rstrip("+")
    if base == "have":
        s3 = "has"
    elif base.endswith(("s", "x", "z", "ch", "sh", "o")):
        s3 = base + "es"
    elif base.endswith("y") and base[-2] not in "aeiou":
        s3 = base[:-1] + "ies"
    else:
        s3 = base + "s"
    if double:
        stem = base + base[-1]
        past, ing = stem + "ed", stem + "ing"
    else:
        if base.endswith("e"):
            past = base + "d"
        elif base.endswith("y") and base[-2] not in "aeiou":
            past = base[:-1] + "ied"
        else:
            past = base + "ed"
        if base.endswith("ie"):
            ing = base[:-2] + "ying"
        elif base.endswith("e") and not base.endswith(("ee", "ye", "oe")) and base != "be":
            ing = base[:-1] + "ing"
        else:
            ing = base + "ing"
    pp = past
    if irr:
        past = irr[0]
        pp = irr[1] if len(irr) > 1 else irr[0]
    return {"base": base, "s3": s3, "past": past, "pp": pp, "ing": ing}


def _verbs(spec: str) -> list[dict[str, str]]:
    return [_verb_forms(v) for v in spec.split()]


# Transitive verbs grouped by the kind of object they take (semantic plausibility).
V_THING = _verbs(
    "carry bring/brought take/took/taken buy/bought sell/sold hold/held drop+ lose/lost "
    "keep/kept move push pull throw/threw/thrown catch/caught hide/hid/hidden fix clean wash "
    "fill cover lift check share borrow choose/chose/chosen need want open close pack wrap+ "
    "find/found see/saw/seen notice paint repair return forget+/forgot/forgotten "
    "put+/put/put leave/left/left break/broke/broken steal/stole/stolen"
)
V_FOOD = _verbs(
    "eat/ate/eaten cook bake cut+/cut/cut taste order share buy/bought want finish prepare "
    "bring/brought"
)
V_DRINK = _verbs("drink/drank/drunk pour order want finish")
V_PLACE = _verbs(
    "visit leave/left/left reach enter explore cross clean paint find/found see/saw/seen"
)
V_PERSON = _verbs(
    "help call ask thank invite meet/met/met visit teach/taught/taught follow wake/woke/woken "
    "see/saw/seen find/found remember forget+/forgot/forgotten tell/told/told greet "
    "hug+ miss watch trust answer join warn"
)
V_ANIMAL = _verbs("feed/fed/fed wash follow chase watch see/saw/seen catch/caught/caught")
V_TEXT = _verbs("read/read/read write/wrote/written find/found send/sent/sent print copy")
V_SONG = _verbs("sing/sang/sung hear/heard/heard play learn whistle")
V_GAME = _verbs("play win/won/won lose/lost/lost watch")
V_TELL = _verbs("tell/told/told hear/heard/heard remember share")
V_VEHICLE = _verbs("drive/drove/driven park wash fix stop+ catch/caught/caught miss")
V_IDEA = _verbs("explain discuss understand/understood/understood remember like")

V_INTRANS_PERSON = _verbs(
    "sleep/slept walk run+/ran/run laugh smile cry wait sit+/sat/sat stand/stood/stood "
    "swim+/swam/swum jump dance shout arrive rest work travel listen stay hurry return "
    "sing/sang/sung play cook climb wake/woke/woken fall/fell/fallen leave/left/left "
    "study win+/won/won smile whisper speak/spoke/spoken"
)
V_INTRANS_ANIMAL = _verbs(
    "sleep/slept walk run+/ran/run jump swim+/swam/swum rest wait sit+/sat/sat hide/hid/hidden "
    "play climb"
)
V_INTRANS_NATURE = _verbs("shine/shone/shone fall/fell/fallen move grow/grew/grown")

TRANSITIVE_FRAMES: list[tuple[list[dict[str, str]], list]] = [
    (V_THING, THINGS),
    (V_FOOD, FOOD),
    (V_DRINK, DRINKS),
    (V_PLACE, PLACES),
    (V_PERSON, PEOPLE),
    (V_ANIMAL, ANIMALS),
    (V_TEXT, TEXTS),
    (V_SONG, SONGS),
    (V_GAME, GAMES),
    (V_TELL, TELLABLES),
    (V_VEHICLE, VEHICLES),
    (V_IDEA, ABSTRACT),
]
FRAME_WEIGHTS = [10, 5, 2, 4, 7, 3, 3, 1, 1, 1, 2, 2]

# ----------------------------------------------------------------------------- adjectives etc.

ADJ_GENERAL = (
    "big small old new long short heavy light soft hard warm cold hot cool wet dry clean dirty "
    "dark bright quiet loud empty full fresh round square sharp smooth rough cheap expensive "
    "strange simple beautiful pretty ugly tiny huge wide narrow deep perfect rare familiar "
    "ancient modern wooden golden dusty shiny broken favorite green red blue yellow white black "
    "brown gray pink purple famous important special useful lovely plain"
).split()
ADJ_PERSON = (
    "happy sad tired hungry thirsty sleepy calm angry proud lucky brave busy careful clever kind "
    "friendly gentle honest polite funny serious curious nervous excited ready young tall strong "
    "weak rich poor lazy quiet shy patient lonely healthy sick famous wise cheerful"
).split()
ADJ_ANIMAL = "small big old young hungry tired wild friendly lazy quick brown black white".split()
ADJ_FOOD = "fresh sweet sour bitter salty hot cold warm delicious cheap expensive".split()
ADJ_PLACE = (
    "big small old new quiet noisy busy crowded empty dark bright warm cold clean dirty famous "
    "beautiful lovely narrow wide safe dangerous"
).split()
ADJ_WEATHER = "sunny rainy windy cloudy cold warm hot foggy".split()
INTENSIFIERS = "very quite really too so rather extremely".split()
COMPARATIVES = (
    "bigger smaller older younger taller shorter faster slower warmer colder louder quieter "
    "heavier lighter stronger longer brighter darker cheaper happier busier easier"
).split()
SUPERLATIVES = "biggest smallest oldest youngest tallest fastest warmest coldest best worst".split()
MANNER_ADVERBS = (
    "quickly slowly quietly loudly carefully happily sadly gently suddenly easily badly well "
    "politely calmly softly patiently proudly nervously"
).split()
FREQ_ADVERBS = "always never often sometimes usually rarely".split()
PLACE_ADVERBS = (
    "outside inside upstairs downstairs away home everywhere somewhere here there"
).split()

PREP_PLACE = (
    "in at near behind beside outside inside across along around toward past through "
    "under over by from into"
).split()

# ----------------------------------------------------------------------------- function words

PRONOUNS_SUBJ = [
    ("I", "1s"),
    ("you", "2"),
    ("he", "3s"),
    ("she", "3s"),
    ("we", "1p"),
    ("they", "3p"),
    ("it", "3s"),
]
PRONOUNS_OBJ = "me you him her us them it".split()
POSSESSIVES = "my your his her our their".split()
FUNCTION_WORDS = (
    "the a an this that these those every each some any no many few several all both another "
    "other and but or so yet because although though when while if unless since until after "
    "before as whether that who which what where why how whose than not there here please "
    "let's do does did don't doesn't didn't is are was were am be been being has have had "
    "can could will would should must might may shall can't won't isn't wasn't aren't "
    "weren't couldn't shouldn't haven't hasn't it's i'm we're they're you're that's there's "
    "i'll we'll ago last next this tonight today tomorrow yesterday now then soon later already "
    "again together just only even also still almost nearly perhaps probably certainly clearly "
    "said says asked thinks thought wonder know knew believe hope hoped guess think of to for "
    "with without about on up down off out one more most less much little lot than like said "
    "told hours o'clock percent dollars dollar cents cent oh point half dozen nobody everyone "
    "someone something nothing everything time born happened began cost costs leaves left "
    "starts started opens closed weighs weighed wait waited waiting meeting concert party "
    "class show film movie trip holiday floor page chapter room number people place what a "
    "how very once twice rains rained snows snowed stops stopped is believed believes built "
    "counted ends ever family gone hopes knows looks right weather weekends wondered world "
    "guesses thinks hopes explained remembered forgot weather with without together alone "
    "luckily sadly suddenly finally course he's she's they'll you'll he'll she'll i've we've "
    "they've you've"
).split()
NUMBER_WORDS = (
    [number_to_words(i) for i in range(20)]
    + "twenty thirty forty fifty sixty seventy eighty ninety hundred thousand million".split()
    + [ordinal_to_words(i) for i in range(1, 21)]
    + ["thirtieth"]
)

# ----------------------------------------------------------------------------- generator

_CONTRACTIONS = {
    ("I", "am"): "I'm",
    ("we", "are"): "we're",
    ("they", "are"): "they're",
    ("you", "are"): "you're",
    ("he", "is"): "he's",
    ("she", "is"): "she's",
    ("I", "will"): "I'll",
    ("we", "will"): "we'll",
    ("they", "will"): "they'll",
    ("you", "will"): "you'll",
    ("he", "will"): "he'll",
    ("she", "will"): "she'll",
    ("I", "have"): "I've",
    ("we", "have"): "we've",
    ("they", "have"): "they've",
    ("you", "have"): "you've",
}

Words = list[str]


def _cap(word: str) -> str:
    return word[:1].upper() + word[1:]


def _starts_with_vowel_sound(word: str) -> bool:
    w = word.lower()
    if w.startswith(("hour", "honest", "honor")):
        return True
    return w[:1] in "aeiou" and not w.startswith(("use", "uni", "one", "eu", "usu"))


def _fix_articles(words: Words) -> Words:
    """'a' -> 'an' before a vowel sound and 'an' -> 'a' before a consonant sound."""
    out = list(words)
    for i in range(len(out) - 1):
        if out[i] in ("a", "an"):
            out[i] = "an" if _starts_with_vowel_sound(out[i + 1]) else "a"
    return out


class SentenceGenerator:
    """Seeded random sentence generator (see module docstring). `sentence()` -> raw text."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self._templates: list[tuple[float, Callable[[], str]]] = [
            (14, self._declarative),
            (5, self._intransitive),
            (5, self._copular),
            (3, self._existential),
            (2, self._comparative),
            (7, self._yes_no_question),
            (7, self._wh_question),
            (6, self._imperative),
            (2, self._exclamation),
            (4, self._reported),
            (3, self._relative),
            (9, self._subordinate),
            (6, self._coordinated),
            (6, self._numbers),
            (12, self._long),
        ]

    # -- helpers
    def p(self, prob: float) -> bool:
        return self.rng.random() < prob

    def pick(self, seq):
        return self.rng.choice(seq)

    def weighted(self, items, weights):
        return self.rng.choices(items, weights=weights, k=1)[0]

    # -- noun phrases: returns (words, person) with person in {1s,2,3s,1p,3p}
    def _adj_for(self, nouns) -> list[str]:
        if nouns is PEOPLE:
            return ADJ_PERSON
        if nouns is ANIMALS:
            return ADJ_ANIMAL
        if nouns in (FOOD, DRINKS):
            return ADJ_FOOD
        if nouns is PLACES:
            return ADJ_PLACE
        return ADJ_GENERAL

    def noun_phrase(
        self,
        nouns,
        plural: bool | None = None,
        definite: bool | None = None,
        adj_prob: float = 0.35,
        pp_prob: float = 0.0,
    ) -> tuple[Words, str]:
        sing, plur = self.pick(nouns)
        if plur is None:  # uncountable
            plural, count_ok = False, False
        else:
            count_ok = True
            if plural is None:
                plural = self.p(0.3)
        noun = plur if plural else sing
        words: Words = []
        r = self.rng.random()
        if definite or (definite is None and r < 0.45):
            words.append("the")
        elif r < 0.6:
            words.append(self.pick(POSSESSIVES))
        elif r < 0.7:
            words.append(self.pick(["these", "those"] if plural else ["this", "that"]))
        elif plural and count_ok:
            words.append(
                self.pick(
                    [
                        "some",
                        "many",
                        "few",
                        "several",
                        "two",
                        "three",
                        "four",
                        "five",
                        "ten",
                        "twelve",
                        "all the",
                        "both",
                    ]
                )
            )
        elif not count_ok:
            words.append(self.pick(["some", "the", "more", "a little"]))
        else:
            words.append("a")
        if self.p(adj_prob):
            if self.p(0.15):
                words.append(self.pick(["very", "really", "quite"]))
            words.append(self.pick(self._adj_for(nouns)))
        words = " ".join(words).split() + [noun]
        words = _fix_articles(words)
        if self.p(pp_prob):
            words += self.place_pp(adj_prob=0.0)
        return words, ("3p" if plural else "3s")

    def person(self, allow_pronoun: bool = True) -> tuple[Words, str]:
        r = self.rng.random()
        if allow_pronoun and r < 0.35:
            pron, person = self.pick(PRONOUNS_SUBJ[:-1])
            return [pron], person
        if r < 0.5:
            return [_cap(self.pick(FIRST_NAMES))], "3s"
        if r < 0.58:
            return [self.pick(TITLES), _cap(self.pick(SURNAMES))], "3s"
        return self.noun_phrase(PEOPLE, pp_prob=0.05)

    def subject(self) -> tuple[Words, str, str]:
        """(words, person, kind) with kind 'person' or 'animal'."""
        if self.p(0.03):
            return [self.pick(["someone", "everyone", "nobody"])], "3s", "person"
        if self.p(0.82):
            w, p = self.person()
            return w, p, "person"
        w, p = self.noun_phrase(ANIMALS)
        return w, p, "animal"

    def place_pp(self, adj_prob: float = 0.3) -> Words:
        np_, _ = self.noun_phrase(PLACES, plural=self.p(0.1), adj_prob=adj_prob)
        return [self.pick(PREP_PLACE)] + np_

    def time_phrase(self, tense: str) -> Words:
        past = [
            "yesterday",
            "last night",
            "last week",
            "last year",
            "this morning",
            f"{self.pick(['two', 'three', 'five', 'ten', 'a few'])} "
            f"{self.pick(['days', 'weeks', 'years', 'hours'])} ago",
            f"on {_cap(self.pick(DAYS))}",
            f"in {_cap(self.pick(MONTHS))}",
            f"after {self.pick(MEALS)}",
            f"before {self.pick(MEALS)}",
            f"in the {self.pick(TIMES_OF_DAY[:3])}",
            "at night",
            "once",
            "again",
        ]
        future = [
            "tomorrow",
            "next week",
            "next year",
            "tonight",
            "soon",
            "later",
            f"on {_cap(self.pick(DAYS))}",
            f"after {self.pick(MEALS)}",
            f"in the {self.pick(TIMES_OF_DAY[:3])}",
            f"next {_cap(self.pick(MONTHS))}",
            f"this {self.pick(SEASONS)}",
            "again",
        ]
        present = [
            "every day",
            "every morning",
            f"every {_cap(self.pick(DAYS))}",
            "on weekends",
            f"in the {self.pick(TIMES_OF_DAY[:3])}",
            "at night",
            f"in the {self.pick(SEASONS)}",
            "now",
            "today",
            "twice a week",
        ]
        table = {"past": past, "future": future, "present": present}
        return self.pick(table.get(tense, present)).split()

    # -- verb phrases
    def conj(self, verb: dict[str, str], tense: str, person: str) -> Words:
        """Finite verb group for tense in {past, present, future, progressive, perfect, modal,
        past_progressive}."""
        third = person == "3s"
        if tense == "past":
            return [verb["past"]]
        if tense == "present":
            return [verb["s3"] if third else verb["base"]]
        if tense == "future":
            return ["will", verb["base"]]
        if tense == "progressive":
            be = "am" if person == "1s" else ("is" if third else "are")
            return [be, verb["ing"]]
        if tense == "past_progressive":
            be = "was" if person in ("1s", "3s") else "were"
            return [be, verb["ing"]]
        if tense == "perfect":
            return ["has" if third else "have", verb["pp"]]
        if tense == "modal":
            return [self.pick(["can", "could", "should", "might", "must", "would"]), verb["base"]]
        raise ValueError(tense)

    def pick_tense(self) -> str:
        return self.weighted(
            ["past", "present", "future", "progressive", "past_progressive", "perfect", "modal"],
            [30, 15, 12, 10, 6, 10, 10],
        )

    def transitive(self, kind: str = "person") -> tuple[list[dict[str, str]], Words]:
        """(verb list, object words) with a plausible object for the verb group."""
        if kind == "animal":
            verbs, objs = self.pick(
                [(V_FOOD[:1], FOOD), (V_ANIMAL[2:4], ANIMALS), (V_THING[:1], THINGS)]
            )
        else:
            verbs, objs = self.weighted(TRANSITIVE_FRAMES, FRAME_WEIGHTS)
        if objs is PEOPLE and self.p(0.35):
            obj = [self.pick(PRONOUNS_OBJ[:-1])] if self.p(0.5) else [_cap(self.pick(FIRST_NAMES))]
        else:
            obj, _ = self.noun_phrase(objs, pp_prob=0.08)
        return verbs, obj

    def clause(self, tense: str | None = None, short: bool = False) -> Words:
        tense = tense or self.pick_tense()
        subj, person, kind = self.subject()
        words = list(subj)
        if kind == "person" and self.p(0.8) or kind == "animal" and self.p(0.3):
            verbs, obj = self.transitive(kind)
            verb = self.pick(verbs)
            vp = self.conj(verb, tense, person) + obj
        else:
            verbs = V_INTRANS_PERSON if kind == "person" else V_INTRANS_ANIMAL
            vp = self.conj(self.pick(verbs), tense, person)
        if tense == "present" and self.p(0.3):
            vp = [self.pick(FREQ_ADVERBS)] + vp
        words += vp
        if self.p(0.07):
            companion = (
                self.person(allow_pronoun=False)[0]
                if self.p(0.6)
                else self.noun_phrase(THINGS, adj_prob=0.2)[0]
            )
            words += [self.pick(["with", "without"])] + companion
        elif self.p(0.04):
            words.append("together" if person.endswith("p") else "alone")
        if len(words) >= 2 and (words[0], words[1]) in _CONTRACTIONS and self.p(0.4):
            words = [_CONTRACTIONS[(words[0], words[1])]] + words[2:]
        if not short:
            if self.p(0.45):
                words += self.place_pp()
            if self.p(0.15):
                words.append(self.pick(MANNER_ADVERBS))
            if self.p(0.3) and tense in ("past", "future", "present"):
                words += self.time_phrase(tense)
        return words

    # -- templates (each returns the raw sentence text)
    @staticmethod
    def _finish(words: Words, end: str = ".") -> str:
        text = " ".join(words)
        text = text.replace(" ,", ",")
        return _cap(text) + end

    def _declarative(self) -> str:
        if self.p(0.1):
            adv = self.pick(
                [
                    "perhaps",
                    "probably",
                    "certainly",
                    "clearly",
                    "luckily",
                    "sadly",
                    "suddenly",
                    "finally",
                    "of course",
                ]
            )
            return self._finish(adv.split() + [","] + self.clause())
        return self._finish(self.clause())

    def _intransitive(self) -> str:
        tense = self.pick(["past", "present", "future", "progressive", "perfect"])
        if self.p(0.2):
            w, person = self.noun_phrase(NATURE, adj_prob=0.2)
            verb = self.pick(V_INTRANS_NATURE)
        else:
            w, person, kind = self.subject()
            verb = self.pick(V_INTRANS_PERSON if kind == "person" else V_INTRANS_ANIMAL)
        words = w + self.conj(verb, tense, person)
        if self.p(0.5):
            words.append(self.pick(MANNER_ADVERBS + PLACE_ADVERBS))
        if self.p(0.5):
            words += self.place_pp()
        if self.p(0.3) and tense in ("past", "future", "present"):
            words += self.time_phrase(tense)
        return self._finish(words)

    def _be(self, person: str, past: bool) -> str:
        if past:
            return "was" if person in ("1s", "3s") else "were"
        return "am" if person == "1s" else ("is" if person == "3s" else "are")

    def _copular(self) -> str:
        r = self.rng.random()
        past = self.p(0.5)
        if r < 0.4:
            subj, person = self.person()
            adj = ADJ_PERSON
        elif r < 0.6:
            subj, person = self.noun_phrase(PLACES, definite=True, adj_prob=0.0)
            adj = ADJ_PLACE
        elif r < 0.75:
            subj, person = self.noun_phrase(FOOD + DRINKS, definite=True, adj_prob=0.0)
            adj = ADJ_FOOD
        elif r < 0.85:
            subj, person = ["the", "weather"], "3s"
            adj = ADJ_WEATHER
        else:
            subj, person = self.noun_phrase(THINGS, definite=True, adj_prob=0.0, pp_prob=0.2)
            adj = ADJ_GENERAL
        words = subj + [self._be(person, past)]
        if self.p(0.15):
            words.append("not")
        if self.p(0.35):
            words.append(self.pick(INTENSIFIERS))
        words.append(self.pick(adj))
        if self.p(0.25):
            words += self.time_phrase("past" if past else "present")
        return self._finish(words)

    def _existential(self) -> str:
        plural = self.p(0.5)
        nouns = self.pick([THINGS, ANIMALS, PEOPLE, FOOD])
        np_, person = self.noun_phrase(nouns, plural=plural, definite=False)
        if np_[0] in ("the", "this", "that", "these", "those") or np_[0] in POSSESSIVES:
            np_ = _fix_articles((["some"] if person == "3p" else ["a"]) + np_[1:])
        past = self.p(0.5)
        be = ("were" if person == "3p" else "was") if past else ("are" if person == "3p" else "is")
        words = ["there", be] + np_ + self.place_pp()
        if self.p(0.2):
            words += self.time_phrase("past" if past else "present")
        return self._finish(words)

    def _comparative(self) -> str:
        nouns = self.pick([PEOPLE, ANIMALS, THINGS, PLACES])
        a, person = self.noun_phrase(nouns, definite=True, adj_prob=0.0)
        if self.p(0.7):
            b, _ = self.noun_phrase(nouns, definite=True, adj_prob=0.0)
            words = a + [self._be(person, self.p(0.4)), self.pick(COMPARATIVES), "than"] + b
        else:
            words = a + [self._be(person, self.p(0.4)), "the", self.pick(SUPERLATIVES), "one"]
            words += [
                "in",
                "the",
                self.pick(["city", "village", "house", "family", "class", "world", "room", "town"]),
            ]
        return self._finish(words)

    def _yes_no_question(self) -> str:
        r = self.rng.random()
        subj, person, kind = self.subject()
        if kind == "person" and self.p(0.8):
            verbs, obj = self.transitive()
        else:
            verbs, obj = (V_INTRANS_PERSON if kind == "person" else V_INTRANS_ANIMAL), []
        verb = self.pick(verbs)
        third = person == "3s"
        if r < 0.35:
            words = ["did"] + subj + [verb["base"]] + obj
            tense = "past"
        elif r < 0.5:
            words = ["does" if third else "do"] + subj + [verb["base"]] + obj
            tense = "present"
        elif r < 0.65:
            words = [self.pick(["will", "can", "could", "should", "would"])] + subj
            words += [verb["base"]] + obj
            tense = "future"
        elif r < 0.8:
            words = (
                ["has" if third else "have"]
                + subj
                + [self.pick(["ever", "already", ""]), verb["pp"]]
                + obj
            )
            tense = "perfect"
        else:
            be = "am" if person == "1s" else ("is" if third else "are")
            words = [be] + subj + [verb["ing"]] + obj
            tense = "progressive"
        if tense == "past" and self.p(0.3) or tense == "future" and self.p(0.3):
            words += self.time_phrase(tense)
        elif self.p(0.25):
            words += self.place_pp()
        words = [w for w in words if w]
        if self.p(0.1):  # negative question
            words[0] = {
                "did": "didn't",
                "does": "doesn't",
                "do": "don't",
                "will": "won't",
                "can": "can't",
                "has": "hasn't",
                "have": "haven't",
                "is": "isn't",
                "are": "aren't",
            }.get(words[0], words[0])
        return self._finish(words, "?")

    def _wh_question(self) -> str:
        r = self.rng.random()
        subj, person, kind = self.subject()
        aux_past = "did"
        if r < 0.2:  # what/which + object gap
            verbs, obj = self.transitive()
            verb = self.pick(verbs)
            if (
                obj
                and obj[0]
                in ("the", "a", "an", "this", "that", "my", "your", "his", "her", "our", "their")
                and self.p(0.5)
            ):
                head = ["which", obj[-1]]
            else:
                head = ["what"]
            words = head + [aux_past] + subj + [verb["base"]]
            if self.p(0.4):
                words += self.time_phrase("past")
        elif r < 0.55:  # where/when/why/how + full clause
            wh = self.pick(["where", "when", "why", "how"])
            tense = self.pick(["past", "present", "future", "perfect"])
            if kind == "person":
                verbs, obj = self.transitive()
            else:
                verbs, obj = V_INTRANS_ANIMAL, []
            verb = self.pick(verbs)
            third = person == "3s"
            aux = {
                "past": ["did"],
                "present": ["does" if third else "do"],
                "future": [self.pick(["will", "should", "can", "would"])],
                "perfect": ["has" if third else "have"],
            }[tense]
            v = verb["pp"] if tense == "perfect" else verb["base"]
            words = [wh] + aux + subj + [v] + obj
        elif r < 0.7:  # who + verb
            verbs, obj = self.transitive()
            verb = self.pick(verbs)
            tense = self.pick(["past", "present", "future", "perfect"])
            words = ["who"] + self.conj(verb, tense, "3s") + obj
            if self.p(0.3):
                words += self.place_pp()
        elif r < 0.82:  # how many
            nouns = self.pick([THINGS, ANIMALS, PEOPLE, FOOD])
            _sing, plur = self.pick([n for n in nouns if n[1]])
            verb = self.pick(V_PERSON[:6] if nouns is PEOPLE else V_THING[:8])
            words = ["how", "many", plur, "did"] + subj + [verb["base"]]
            if self.p(0.4):
                words += self.place_pp()
        elif r < 0.92:  # why/how + copula
            np_, p2 = self.noun_phrase(
                self.pick([PLACES, FOOD, THINGS]), definite=True, adj_prob=0.0
            )
            adj = self.pick(ADJ_GENERAL if np_[-1] not in [p[0] for p in PLACES] else ADJ_PLACE)
            be = self._be(p2, self.p(0.4))
            if self.p(0.5):
                words = ["why", be] + np_ + [self.pick(["so", "always", "still"]), adj]
            else:
                words = ["how", adj, be] + np_
        else:  # what time / whose
            if self.p(0.5):
                if self.p(0.5):
                    np_, p2 = self.noun_phrase(VEHICLES, definite=True, adj_prob=0.0)
                    v = self.pick(["leave", "arrive", "stop"])
                else:
                    np_, p2 = self.noun_phrase(PLACES[:30], definite=True, adj_prob=0.0)
                    v = self.pick(["open", "close"])
                words = ["what", "time", "does" if p2 == "3s" else "do"] + np_ + [v]
            else:
                n, _ = self.pick(THINGS)
                words = ["whose", n, self.pick(["is", "was"]), self.pick(["this", "that"])]
                words += self.place_pp(adj_prob=0.0) if self.p(0.4) else []
        return self._finish(words, "?")

    def _imperative(self) -> str:
        r = self.rng.random()
        verbs, obj = self.transitive()
        verb = self.pick(verbs)
        if r < 0.5:
            words = (["please"] if self.p(0.4) else []) + [verb["base"]] + obj
            if self.p(0.4):
                words += self.place_pp()
            if self.p(0.3):
                words.append(
                    self.pick(
                        [
                            "now",
                            "quickly",
                            "carefully",
                            "today",
                            "tonight",
                            "right away",
                            "before dinner",
                            "after lunch",
                        ]
                    )
                )
        elif r < 0.7:
            words = ["don't", verb["base"]] + obj + (self.place_pp() if self.p(0.5) else [])
        elif r < 0.85:
            words = ["let's", verb["base"]] + obj + self.time_phrase("future")
        else:
            v2 = self.pick(V_INTRANS_PERSON)
            words = [self.pick(["always", "never"]), verb["base"]] + obj
            words += ["before", "you", v2["base"]]
        words = [w for w in words if w]
        end = "!" if self.p(0.15) else "."
        return self._finish(words, end)

    def _exclamation(self) -> str:
        nouns = self.pick([PLACES, THINGS, ANIMALS, PEOPLE])
        sing, _ = self.pick(nouns)
        adj = self.pick(self._adj_for(nouns))
        if self.p(0.6):
            words = _fix_articles(["what", "a", adj, sing])
            words += ["this", "is"] if self.p(0.3) else []
        else:
            words = ["how", adj, "this", sing, self.pick(["is", "was", "looks"])]
        return self._finish(words, "!")

    def _reported(self) -> str:
        subj, person = self.person()
        r = self.rng.random()
        if r < 0.4:
            verb = self.pick(["said", "thought", "knew", "believed", "hoped", "told me"])
            words = subj + [verb, "that"] + self.clause("past" if self.p(0.6) else "future")
        elif r < 0.7:
            third = person == "3s"
            verb = _verb_forms(self.pick(["think", "know", "believe", "hope", "guess"]))
            words = subj + [verb["s3" if third else "base"]] + self.clause()
        else:
            wh = self.pick(["if", "whether", "why", "where", "when", "how"])
            verb = self.pick(["asked", "wondered", "forgot", "explained", "remembered"])
            words = subj + [verb, wh] + self.clause("past", short=True)
        return self._finish(words)

    def _relative(self) -> str:
        nouns, verbs_rel = self.pick(
            [(PEOPLE, V_THING + V_FOOD), (THINGS, V_THING), (PLACES, V_PLACE), (ANIMALS, V_ANIMAL)]
        )
        head, person = self.noun_phrase(nouns, definite=True, adj_prob=0.2)
        if self.p(0.5) and nouns is PEOPLE:
            v = self.pick(verbs_rel)
            obj_nouns = THINGS if v in V_THING else FOOD
            obj, _ = self.noun_phrase(obj_nouns, adj_prob=0.2)
            rel = [self.pick(["who", "that"]), v["past"]] + obj
        else:
            subj, p2, _ = self.subject()
            v = self.pick(verbs_rel if nouns is not PEOPLE else V_PERSON)
            rel = ["that"] + subj + [v["past"]]
        if self.p(0.6):
            adj = self._adj_for(nouns)
            words = head + rel + [self._be(person, True), self.pick(adj)]
        else:
            verb = (
                self.pick(V_INTRANS_PERSON if nouns is PEOPLE else V_INTRANS_ANIMAL)
                if nouns in (PEOPLE, ANIMALS)
                else None
            )
            if verb is None:
                words = (
                    head
                    + rel
                    + [
                        self._be(person, True),
                        self.pick(["here", "there", "gone", "closed", "open", "empty", "full"]),
                    ]
                )
            else:
                words = head + rel + [verb["past"]] + (self.place_pp() if self.p(0.5) else [])
        return self._finish(words)

    def _subordinate(self) -> str:
        r = self.rng.random()
        if r < 0.2:  # if + present, future
            a, b = self.clause("present", short=True), self.clause("future", short=self.p(0.5))
            sub = "if" if self.p(0.8) else "unless"
        elif r < 0.35:
            a, b = self.clause("past_progressive", short=True), self.clause("past", short=True)
            sub = self.pick(["while", "when"])
        else:
            tense = self.pick(["past", "past", "present", "future"])
            a = self.clause("present" if tense == "future" else tense, short=True)
            b = self.clause(tense, short=self.p(0.5))
            sub = self.pick(
                [
                    "because",
                    "although",
                    "when",
                    "after",
                    "before",
                    "since",
                    "until",
                    "as soon as",
                    "even though",
                ]
                if tense != "future"
                else ["when", "after", "before", "as soon as", "until"]
            )
        if self.p(0.5):
            words = [sub] + a + [","] + b
        else:
            words = b + sub.split() + a
        return self._finish(words)

    def _coordinated(self) -> str:
        tense = self.pick(["past", "present", "future", "perfect"])
        conj = self.pick(["and", "but", "so", "or", "and then", "yet"])
        if self.p(0.6):
            words = (
                self.clause(tense, short=True)
                + [",", *conj.split()]
                + self.clause(tense, short=self.p(0.6))
            )
        else:  # shared subject, coordinated verb phrases
            subj, person = self.person()
            verbs1, obj1 = self.transitive()
            verbs2, obj2 = self.transitive()
            if tense == "past":
                vp2 = [self.pick(verbs2)["past"]]
            elif tense == "present":
                vp2 = [self.pick(verbs2)["s3" if person == "3s" else "base"]]
            else:
                vp2 = [self.pick(verbs2)["pp" if tense == "perfect" else "base"]]
            words = (
                subj
                + self.conj(self.pick(verbs1), tense, person)
                + obj1
                + [self.pick(["and", "but", "then"])]
                + vp2
                + obj2
            )
        return self._finish(words)

    def _long(self) -> str:
        """Two or three full clauses (the long tail of the length distribution)."""
        r = self.rng.random()
        tense = self.pick(["past", "past", "present", "future"])
        first = "present" if tense == "future" else tense
        if r < 0.4:
            sub = self.pick(
                ["because", "although", "when", "after", "before", "while", "as soon as"]
                if tense != "future"
                else ["when", "after", "before", "as soon as", "if"]
            )
            a, b = self.clause(first), self.clause(tense)
            words = b + sub.split() + a if self.p(0.5) else sub.split() + a + [","] + b
        elif r < 0.7:
            conj = self.pick(["and", "but", "so", "and then", "while"])
            words = self.clause(tense) + [",", *conj.split()] + self.clause(tense)
        else:
            subj, _ = self.person()
            verb = self.pick(["said", "thought", "knew", "told us", "explained"])
            words = (
                subj
                + [verb, "that"]
                + self.clause("past")
                + [self.pick(["because", "although", "before", "after"])]
                + self.clause("past", short=self.p(0.5))
            )
        return self._finish(words)

    def _numbers(self) -> str:
        r = self.rng.random()
        subj, person = self.person()
        if r < 0.2:
            n, _ = self.pick(THINGS + FOOD[:12])
            dollars = self.rng.randint(1, 99)
            if self.p(0.5):
                price = f"${dollars}.{self.rng.randint(1, 99):02d}"
            else:
                price = f"${dollars}"
            words = ["the", n, self.pick(["cost", "costs"]), price]
            if self.p(0.3):
                words += ["at", "the", self.pick(["market", "store", "shop", "bakery"])]
        elif r < 0.35:
            count = self.rng.randint(2, 60)
            sing, plur = self.pick([n for n in THINGS + ANIMALS + FOOD if n[1]])
            verb = self.pick(["bought", "found", "saw", "counted", "needed", "sold", "had"])
            words = subj + [verb, str(count), plur] + (self.place_pp() if self.p(0.4) else [])
        elif r < 0.5:
            h, m = self.rng.randint(1, 12), self.pick([0, 0, 5, 10, 15, 20, 30, 45, 50, 7])
            np_, p2 = self.noun_phrase(
                VEHICLES
                + [
                    ("meeting", "meetings"),
                    ("concert", None),
                    ("class", "classes"),
                    ("party", None),
                    ("film", None),
                ],
                plural=False,
                definite=True,
                adj_prob=0.0,
            )
            verb = self.pick(["leaves", "starts", "opens", "arrives", "ends"])
            words = np_ + [verb, "at", f"{h}:{m:02d}"] + self.time_phrase("present")[:2]
        elif r < 0.62:
            year = self.rng.randint(1950, 2024)
            verb = self.pick(
                [
                    "was born",
                    "moved to the city",
                    "built the house",
                    "wrote the book",
                    "visited the island",
                    "started school",
                ]
            )
            words = subj + verb.split() + ["in", str(year)]
        elif r < 0.75:
            day = self.rng.randint(1, 31)
            suffix = {1: "st", 2: "nd", 3: "rd", 21: "st", 22: "nd", 23: "rd", 31: "st"}.get(
                day, "th"
            )
            clause = self.clause("past", short=True)
            month = _cap(self.pick(MONTHS))
            if self.p(0.5):
                words = clause + ["on", month, f"{day}{suffix}"]
            else:
                words = clause + ["on", "the", f"{day}{suffix}", "of", month]
        elif r < 0.85:
            pct = self.rng.randint(2, 99)
            nouns = self.pick([PEOPLE, ANIMALS, THINGS])
            _sing, plur = self.pick([n for n in nouns if n[1]])
            adj = self.pick(self._adj_for(nouns))
            words = [
                self.pick(["only", "almost", "about", "nearly", ""]),
                f"{pct}%",
                "of",
                "the",
                plur,
                self.pick(["were", "are"]),
                adj,
            ]
        else:
            count = self.rng.randint(2, 90)
            unit = self.pick(["minutes", "hours", "days", "weeks", "years"])
            verb = self.pick(
                ["waited", "walked", "worked", "slept", "studied", "traveled", "stayed"]
            )
            words = (
                subj + [verb, "for", str(count), unit] + (self.place_pp() if self.p(0.5) else [])
            )
        words = [w for w in words if w]
        return self._finish(words)

    # -- public
    def sentence(self) -> str:
        weights = [w for w, _ in self._templates]
        fns = [f for _, f in self._templates]
        while True:
            text = self.weighted(fns, weights)()
            n = len(normalize_text(text).split())
            if MIN_WORDS <= n <= MAX_WORDS:
                return text


def generate_sentences(n: int, seed: int = 0, normalized: bool = False) -> list[str]:
    """`n` raw sentences with pairwise-distinct normalised text; deterministic in `seed`.

    `normalized=True` returns the normalised texts (`normalize_text`) of the same sentences.
    """
    gen = SentenceGenerator(seed)
    seen: set[str] = set()
    out: list[str] = []
    while len(out) < n:
        text = gen.sentence()
        key = normalize_text(text)
        if key not in seen:
            seen.add(key)
            out.append(key if normalized else text)
    return out


def _vocabulary() -> frozenset[str]:
    words: set[str] = set()
    for nouns in (
        PEOPLE,
        ANIMALS,
        THINGS,
        FOOD,
        DRINKS,
        PLACES,
        VEHICLES,
        TEXTS,
        SONGS,
        TELLABLES,
        GAMES,
        ABSTRACT,
        NATURE,
        DURATIONS,
    ):
        for sing, plur in nouns:
            words.add(sing)
            if plur:
                words.add(plur)
    for verbs, _ in TRANSITIVE_FRAMES:
        for v in verbs:
            words.update(v.values())
    for verbs in (V_INTRANS_PERSON, V_INTRANS_ANIMAL, V_INTRANS_NATURE):
        for v in verbs:
            words.update(v.values())
    for group in (
        MEALS,
        TIMES_OF_DAY,
        DAYS,
        MONTHS,
        SEASONS,
        FIRST_NAMES,
        SURNAMES,
        ADJ_GENERAL,
        ADJ_PERSON,
        ADJ_ANIMAL,
        ADJ_FOOD,
        ADJ_PLACE,
        ADJ_WEATHER,
        INTENSIFIERS,
        COMPARATIVES,
        SUPERLATIVES,
        MANNER_ADVERBS,
        FREQ_ADVERBS,
        PLACE_ADVERBS,
        PREP_PLACE,
        PRONOUNS_OBJ,
        POSSESSIVES,
        FUNCTION_WORDS,
    ):
        words.update(group)
    for title in TITLES:
        words.update(normalize_text(title).split())
    words.update(p.lower() for p, _ in PRONOUNS_SUBJ)
    for w in NUMBER_WORDS:
        words.update(w.split())
    return frozenset(w.lower() for w in words)


VOCABULARY: frozenset[str] = _vocabulary()
