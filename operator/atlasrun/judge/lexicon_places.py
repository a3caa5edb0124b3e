"""Place names as other languages write them ("München" for Munich, "Deutschland" for Germany): an
answer in another language, or one quoting a local name, names the same place. Each group lists
one place's names; matching is both ways (``judge.matching``)."""

from __future__ import annotations

_GROUPS = [
    ("Munich", "München", "Múnich", "Monaco di Baviera"),
    ("Cologne", "Köln", "Colonia"),
    ("Nuremberg", "Nürnberg"),
    ("Vienna", "Wien", "Vienne", "Viena"),
    ("Zurich", "Zürich", "Zúrich"),
    ("Geneva", "Genève", "Genf", "Ginebra", "Ginevra"),
    ("Brussels", "Bruxelles", "Brüssel", "Brussel", "Bruselas"),
    ("The Hague", "Den Haag", "La Haye", "La Haya"),
    ("Rome", "Roma", "Rom"),
    ("Milan", "Milano", "Mailand", "Milán"),
    ("Florence", "Firenze", "Florenz", "Florencia"),
    ("Venice", "Venezia", "Venedig", "Venecia", "Venise"),
    ("Naples", "Napoli", "Neapel", "Nápoles"),
    ("Turin", "Torino", "Turín"),
    ("Lisbon", "Lisboa", "Lissabon", "Lisbonne"),
    ("Seville", "Sevilla", "Séville"),
    ("Prague", "Praha", "Prag", "Praga"),
    ("Warsaw", "Warszawa", "Warschau", "Varsovie", "Varsovia"),
    ("Copenhagen", "København", "Kopenhagen", "Copenhague"),
    ("Gothenburg", "Göteborg"),
    ("Athens", "Athen", "Athènes", "Atenas", "Atene"),
    ("Moscow", "Moskau", "Moscou", "Moscú", "Mosca"),
    ("London", "Londres", "Londra"),
    ("Beijing", "Peking", "Pékin", "Pekín", "Pechino"),
    ("New York", "Nueva York"),
    ("Mexico City", "Ciudad de México"),
    ("Germany", "Deutschland", "Allemagne", "Alemania", "Germania"),
    ("France", "Frankreich", "Francia"),
    ("Spain", "Spanien", "España", "Espagne", "Spagna"),
    ("Italy", "Italien", "Italia", "Italie"),
    ("Switzerland", "Schweiz", "Suisse", "Suiza", "Svizzera"),
    ("Austria", "Österreich", "Autriche"),
    ("Netherlands", "Niederlande", "Pays-Bas", "Países Bajos", "Paesi Bassi", "Nederland"),
    ("Belgium", "Belgien", "Belgique", "Bélgica", "België"),
    ("Portugal", "Portogallo"),
    ("Poland", "Polen", "Pologne", "Polonia", "Polska"),
    ("Sweden", "Schweden", "Suède", "Suecia", "Sverige"),
    ("Norway", "Norwegen", "Norvège", "Noruega", "Norge"),
    ("Denmark", "Dänemark", "Danemark", "Dinamarca", "Danmark"),
    ("Greece", "Griechenland", "Grèce", "Grecia"),
    ("Japan", "Japon", "Japón", "Giappone"),
    ("China", "Chine", "Cina"),
    ("United States", "Vereinigte Staaten", "États-Unis", "Estados Unidos", "Stati Uniti"),
    ("United Kingdom", "Vereinigtes Königreich", "Royaume-Uni", "Reino Unido", "Regno Unito"),
]

OTHER_NAMES: dict[str, tuple[str, ...]] = {
    name.lower(): tuple(other for other in group if other != name) for group in _GROUPS for name in group
}
