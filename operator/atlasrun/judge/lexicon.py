"""Word lists of the deterministic judge: number words, units, months, direction words and cues.

Kept apart from the matching logic so the judge's vocabulary can be read (and extended) in one place.
"""

from __future__ import annotations

SMALL_NUMBERS = {
    w: i
    for i, w in enumerate(
        [
            "zero",
            "one",
            "two",
            "three",
            "four",
            "five",
            "six",
            "seven",
            "eight",
            "nine",
            "ten",
            "eleven",
            "twelve",
            "thirteen",
            "fourteen",
            "fifteen",
            "sixteen",
            "seventeen",
            "eighteen",
            "nineteen",
        ]
    )
}
TENS = {
    w: 10 * (i + 2)
    for i, w in enumerate(["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"])
}
SCALE_WORDS = {"hundred": 100, "thousand": 1_000, "million": 1_000_000, "billion": 1_000_000_000}

# Phrases rewritten to figures before numbers are read (longest first).
NUMBER_PHRASES: list[tuple[str, str]] = [
    (r"an hour and a half", "1.5 hours"),
    (r"half an hour", "0.5 hours"),
    (r"half a minute", "0.5 minutes"),
    (r"half a dozen", "6"),
    (r"a dozen", "12"),
    (r"three[- ]quarters", "75%"),
    (r"three[- ]fifths", "60%"),
    (r"two[- ]thirds", "66.7%"),
    (r"(?:a|one) quarter", "25%"),
    (r"(?:a|one) third", "33.3%"),
    (r"(?:one )?half", "50%"),
    (r"doubled|double|twice", "2x"),
    (r"tripled|triple|thrice", "3x"),
    (r"quadrupled", "4x"),
]

# unit word -> (dimension, factor to the dimension's base unit)
UNITS: dict[str, tuple[str, float]] = {}
_UNIT_TABLE: dict[str, dict[tuple[str, ...], float]] = {
    "length": {
        ("m", "meter", "meters", "metre", "metres"): 1.0,
        ("km", "kilometer", "kilometers", "kilometre", "kilometres"): 1000.0,
        ("cm", "centimeter", "centimeters", "centimetre", "centimetres"): 0.01,
        ("mm", "millimeter", "millimeters"): 0.001,
        ("mi", "mile", "miles"): 1609.344,
        ("ft", "foot", "feet"): 0.3048,
    },
    "time": {
        ("ms", "millisecond", "milliseconds"): 0.001,
        ("s", "sec", "secs", "second", "seconds"): 1.0,
        ("min", "mins", "minute", "minutes"): 60.0,
        ("h", "hr", "hrs", "hour", "hours"): 3600.0,
        ("day", "days"): 86400.0,
        ("week", "weeks"): 604800.0,
    },
    "mass": {
        ("g", "gram", "grams"): 1.0,
        ("kg", "kilogram", "kilograms", "kilo", "kilos"): 1000.0,
        ("lb", "lbs", "pound", "pounds"): 453.592,
        ("t", "tonne", "tonnes", "ton", "tons"): 1e6,
    },
    "data": {
        ("byte", "bytes"): 1.0,
        ("kb", "kilobyte", "kilobytes"): 1e3,
        ("mb", "megabyte", "megabytes"): 1e6,
        ("gb", "gigabyte", "gigabytes"): 1e9,
        ("tb", "terabyte", "terabytes"): 1e12,
        ("kib", "kibibyte", "kibibytes"): 1024.0,
        ("mib", "mebibyte", "mebibytes"): 1024.0**2,
        ("gib", "gibibyte", "gibibytes"): 1024.0**3,
        ("tib", "tebibyte", "tebibytes"): 1024.0**4,
    },
    "volume": {
        ("l", "liter", "liters", "litre", "litres"): 1.0,
        ("ml", "milliliter", "milliliters", "millilitre", "millilitres"): 0.001,
        ("gal", "gallon", "gallons"): 3.78541,
    },
    "celsius": {("°c", "celsius", "degrees celsius"): 1.0},
    "fahrenheit": {("°f", "fahrenheit", "degrees fahrenheit"): 1.0},
    "energy": {("kwh",): 1.0, ("mwh",): 1000.0},
    "multiple": {("times", "x"): 1.0},
}
for _dim, _entries in _UNIT_TABLE.items():
    for _names, _factor in _entries.items():
        for _name in _names:
            UNITS[_name] = (_dim, _factor)

# Currency marks and words -> one code per currency (a claim in dollars is not met in euros).
CURRENCIES = {
    "$": "USD",
    "usd": "USD",
    "dollar": "USD",
    "dollars": "USD",
    "€": "EUR",
    "eur": "EUR",
    "euro": "EUR",
    "euros": "EUR",
    "£": "GBP",
    "gbp": "GBP",
    "chf": "CHF",
    "jpy": "JPY",
    "yen": "JPY",
    "inr": "INR",
    "rupees": "INR",
    "cad": "CAD",
    "aud": "AUD",
}
SCALES = {
    "k": 1e3,
    "thousand": 1e3,
    "m": 1e6,
    "mn": 1e6,
    "million": 1e6,
    "b": 1e9,
    "bn": 1e9,
    "billion": 1e9,
    "trillion": 1e12,
    "tn": 1e12,
    "mio": 1e6,  # German and French: Mio., Mrd.
    "mrd": 1e9,
}
PERCENT_UNITS = ("%", "percent", "per cent", "percentage points", "percentage point", "points", "pp")

MONTHS = {
    name: i + 1
    for i, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ]
    )
    for name in names
}
WEEKDAYS = {"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"}

# Opposite pairs of direction/polarity concepts; each side lists words (matched on whole words).
DIRECTIONS: list[tuple[set[str], set[str]]] = [
    (
        {
            "rose",
            "rise",
            "rises",
            "risen",
            "rising",
            "increase",
            "increased",
            "increases",
            "grew",
            "grow",
            "grows",
            "grown",
            "climbed",
            "gained",
            "went up",
            "goes up",
            "jumped",
        },
        {
            "fell",
            "fall",
            "falls",
            "fallen",
            "decrease",
            "decreased",
            "decreases",
            "dropped",
            "drop",
            "drops",
            "declined",
            "shrank",
            "shrunk",
            "went down",
            "goes down",
        },
    ),
    (
        {"more", "higher", "greater", "larger", "bigger", "outsold"},
        {"less", "fewer", "lower", "smaller"},
    ),
    (
        {"most", "highest", "largest", "biggest", "greatest", "top"},
        {"least", "lowest", "smallest", "fewest"},
    ),
    ({"public"}, {"private"}),
    ({"open", "opened"}, {"closed", "shut"}),
    ({"enabled"}, {"disabled"}),
    ({"active"}, {"inactive", "disabled"}),
    ({"paid"}, {"unpaid"}),
    ({"healthy"}, {"unhealthy", "down"}),
    ({"authenticated"}, {"unauthenticated", "anonymous"}),
    ({"faster", "fast", "quicker"}, {"slower", "slow"}),
    ({"north", "northbound", "northern"}, {"south", "southbound", "southern"}),
    ({"pass", "passes", "passed", "passing"}, {"fail", "fails", "failed", "failing"}),
    ({"successfully", "succeeded", "success"}, {"failed", "unsuccessfully", "failure"}),
    ({"delayed", "late"}, {"on time", "early"}),
]

# Uncertainty: the right value given uncommitted -> at most partially fulfilled.
HEDGES = (
    "might",
    "may be",
    "maybe",
    "perhaps",
    "possibly",
    "probably",
    "not sure",
    "not certain",
    "i believe",
    "i think",
    "seem to",
    "seems to",
    "could not verify",
    "couldn't verify",
    "could not confirm",
    "couldn't confirm",
    "unclear",
    "either",
    "unverified",
    "uncertain",
    "likely",
    "unlikely",
    "appears to",
    "appear to",
    "appeared to",
    "looks like",
    "presumably",
    "i assume",
    "assuming",
    "i guess",
    "could be",
    "may have",
    "might have",
    "not confirmed",
    "unconfirmed",
    "tentative",
    "if i recall",
    "as far as i can tell",
    "i suspect",
    "best guess",
    "my guess",
    "i'd guess",
    "i would guess",
    "i estimate",
    "if i'm not mistaken",
    "not 100% sure",
    "hard to say",
)
# Refusals and failures: no fact can be credited to an answer made of these alone.
REFUSALS = (
    "could not",
    "couldn't",
    "cannot",
    "can't",
    "unable to",
    "don't have access",
    "do not have access",
    "don't know",
    "do not know",
    "sorry",
    "not available",
    "no access",
    "returned an error",
    "was not found",
    "were not found",
    "n/a",
)

STOPWORDS = set(
    [
        "a",
        "an",
        "the",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "of",
        "in",
        "on",
        "at",
        "to",
        "for",
        "from",
        "by",
        "with",
        "and",
        "or",
        "as",
        "that",
        "this",
        "these",
        "those",
        "it",
        "its",
        "it's",
        "which",
        "who",
        "whom",
        "whose",
        "what",
        "when",
        "where",
        "why",
        "how",
        "than",
        "then",
        "there",
        "their",
        "they",
        "them",
        "he",
        "she",
        "his",
        "her",
        "has",
        "have",
        "had",
        "do",
        "does",
        "did",
        "will",
        "would",
        "can",
        "could",
        "should",
        "shall",
        "into",
        "over",
        "under",
        "about",
        "after",
        "before",
        "between",
        "both",
        "each",
        "all",
        "any",
        "some",
        "such",
        "only",
        "own",
        "same",
        "so",
        "too",
        "very",
        "just",
        "also",
        "per",
        "via",
        "most",
        "many",
        "much",
        "few",
        "out",
        "again",
        "further",
        "once",
        "here",
        "either",
        "neither",
        "nor",
        "if",
        "else",
        "while",
        "during",
        "total",
        "value",
        "values",
        "number",
        "numbers",
        "named",
        "called",
        "respectively",
        "i",
        "we",
        "you",
        "our",
        "your",
        "yes",
        "still",
        "currently",
        "right",
        "now",
        "approximately",
        "about",
        "around",
        "roughly",
        "nearly",
        "almost",
        "some",
        "somewhere",
    ]
)
# Capitalised words that are not names (sentence starts aside).
NOT_NAMES = {"i", "am", "pm", "utc", "gmt", "yes", "no", "it", "n/a", "et", "al"}

# Function words that tell the language of a text (``judge.evidence.foreign``): the judge's other
# word lists are English, so an answer in another language is abstained on, never failed.
ENGLISH_MARKERS = {
    "the", "is", "are", "was", "were", "and", "of", "to", "in", "it", "that", "for", "on", "with",
    "this", "has", "have", "at", "by", "be", "not", "from", "as", "which", "there", "its", "an",
}  # fmt: skip
FOREIGN_MARKERS = {
    # German
    "der", "das", "und", "ist", "nicht", "ein", "eine", "mit", "von", "für", "wurde", "sind", "auf",
    "dem", "den", "des", "zu", "im", "beträgt", "wird", "hat",
    # French
    "le", "les", "est", "et", "une", "pas", "dans", "pour", "du", "au", "sont", "été", "avec", "qui",
    # Spanish / Portuguese / Italian
    "el", "los", "las", "es", "y", "con", "una", "para", "por", "del", "fue", "está", "son", "em",
    "não", "um", "uma", "com", "il", "di", "che", "della", "sono", "è", "ha", "lo", "gli",
    # Dutch
    "het", "een", "niet", "van", "voor", "op", "zijn", "werd",
}  # fmt: skip

# Converse relations: "A manages B" says what "B reports to A" says (stems compared).
CONVERSES: list[tuple[str, str]] = [
    ("manages", "reports"),
    ("supervises", "reports"),
    ("leads", "reports"),
    ("employs", "works"),
    ("precedes", "follows"),
    ("parent", "child"),
    ("owns", "belongs"),
    ("sends", "receives"),
    ("sold", "bought"),
    ("sells", "buys"),
    ("teaches", "learns"),
    ("beat", "lost"),
    ("defeated", "lost"),
]

# Irregular past forms -> the base verb, so "led by" meets "leads" (``judge.roles``).
IRREGULAR_VERBS = {
    "led": "lead", "wrote": "write", "written": "write", "made": "make", "sent": "send", "held": "hold",
    "sold": "sell", "paid": "pay", "built": "build", "won": "win", "ran": "run", "gave": "give",
    "given": "give", "took": "take", "taken": "take", "bought": "buy", "brought": "bring",
    "taught": "teach", "met": "meet", "left": "leave", "kept": "keep", "found": "find", "told": "tell",
    "said": "say", "chose": "choose", "chosen": "choose", "drove": "drive", "driven": "drive",
    "began": "begin", "begun": "begin", "lost": "lose", "beaten": "beat", "got": "get", "gotten": "get",
    "owned": "own", "signed": "sign",
}  # fmt: skip

# Abbreviations an answer writes for a claim's word ("max 25.9 °C" for "the maximum").
ABBREVIATIONS = {
    "max": "maximum",
    "min": "minimum",
    "avg": "average",
    "temp": "temperature",
    "qty": "quantity",
    "approx": "approximately",
    "config": "configuration",
    "repo": "repository",
    "env": "environment",
    "prod": "production",
    "dev": "development",
    "mem": "memory",
    "pct": "percent",
}

# Words that state the opposite of each other's state, for a negated claim ("did not finish" is met by
# "failed"; "is not operational" by "degraded"). Each group with its opposite group.
OPPOSITE_STATES: list[tuple[set[str], set[str]]] = [
    (
        {
            "finish",
            "finished",
            "succeed",
            "succeeded",
            "complete",
            "completed",
            "pass",
            "passed",
            "work",
            "worked",
        },
        {"fail", "failed", "fails", "failing", "crash", "crashed", "abort", "aborted", "timed", "errored"},
    ),
    (
        {"operational", "available", "healthy", "running", "online", "up"},
        {"degraded", "down", "unavailable", "outage", "unhealthy", "offline", "failing", "crashloopbackoff"},
    ),
    ({"enabled", "enable", "active", "on"}, {"disabled", "disable", "inactive", "off"}),
    ({"open", "opened"}, {"closed", "resolved"}),
    ({"paid"}, {"unpaid", "overdue", "outstanding"}),
    ({"allowed", "allow", "permitted"}, {"blocked", "denied", "forbidden", "disabled", "prohibited"}),
]
