"""Word lists for reading figures: number words and phrases, units (with their dimension and factor),
currencies, scale words and percentage units (``judge.reading_quantities``).
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
# 2-12 in German, French, Spanish, Italian, Portuguese and Dutch: a count written out in an answer
# in another language ("drei Monate") is no absent figure (never rewritten: "sept", "elf" are words)
FOREIGN_NUMBER_WORDS: dict[int, tuple[str, ...]] = {
    2: ("zwei", "deux", "dos", "due", "dois", "duas", "twee"),
    3: ("drei", "trois", "tres", "tre", "três", "drie"),
    4: ("vier", "quatre", "cuatro", "quattro", "quatro"),
    5: ("fünf", "cinq", "cinco", "cinque", "vijf"),
    6: ("sechs", "seis", "sei", "zes"),
    7: ("sieben", "sept", "siete", "sette", "sete", "zeven"),
    8: ("acht", "huit", "ocho", "otto", "oito"),
    9: ("neun", "neuf", "nueve", "nove", "negen"),
    10: ("zehn", "dix", "diez", "dieci", "dez", "tien"),
    11: ("elf", "onze", "once", "undici"),
    12: ("zwölf", "douze", "doce", "dodici", "twaalf"),
}
SCALE_WORDS = {"hundred": 100, "thousand": 1_000, "million": 1_000_000, "billion": 1_000_000_000}

# Phrases rewritten to figures before numbers are read (longest first).
NUMBER_PHRASES: list[tuple[str, str]] = [
    (r"(?:a|)round[- ]the[- ]clock", "24 hours"),
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
        ("m", "meter", "meters", "metre", "metres", "metern", "metros", "mètres"): 1.0,
        ("km", "kilometer", "kilometers", "kilometre", "kilometres", "kilometern", "kilómetros"): 1000.0,
        ("cm", "centimeter", "centimeters", "centimetre", "centimetres", "zentimeter", "centímetros"): 0.01,
        ("mm", "millimeter", "millimeters"): 0.001,
        ("mi", "mile", "miles"): 1609.344,
        ("ft", "foot", "feet"): 0.3048,
    },
    "length/h": {("mph",): 1609.344, ("kph", "kmh"): 1000.0},  # as "80 km/h" reads (a rate)
    "time": {
        ("ms", "millisecond", "milliseconds"): 0.001,
        ("s", "sec", "secs", "second", "seconds", "sekunden", "segundos", "secondes"): 1.0,
        ("min", "mins", "minute", "minutes", "minuten", "minutos"): 60.0,
        ("h", "hr", "hrs", "hour", "hours", "stunde", "stunden", "heure", "heures", "hora", "horas"): 3600.0,
        ("day", "days", "tage", "tagen", "días", "jours"): 86400.0,
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
CURRENCY_SIGNS = "$€£¥₹"  # written before (or right after) a figure
CURRENCIES = {
    "¥": "JPY",
    "₹": "INR",
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
# A hundredth of a currency: "24 cents" is $0.24 ("Cent" in a text in euros is a euro cent).
SUBUNITS = {"cent": "USD", "cents": "USD", "¢": "USD", "pence": "GBP", "centimes": "EUR", "céntimos": "EUR"}
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
    "millions": 1e6,
    "billions": 1e9,
    "millionen": 1e6,  # "602 Millionen", "35 millones", "5 milliards"
    "milliarden": 1e9,
    "millones": 1e6,
    "milliards": 1e9,
}
UNSPACED_SCALES = ("k", "m", "b")  # a scale said apart from its figure only when it cannot be a unit
BASIS_POINTS = ("bps", "bp", "basis points", "basis point")  # a hundredth of a percentage point
PERCENT_UNITS = ("%", "percent", "per cent", "percentage points", "percentage point", "points", "pp")
