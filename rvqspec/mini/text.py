"""Sentences for the mini world: small grammars in the six languages of seed 000's Fleurs evaluation.

Each language has word lists (names, noun phrases with the case/gender forms the grammar needs,
verbs, adjectives, places, times) and a handful of sentence templates; a sentence is drawn with a
numpy Generator, so the whole corpus text is a pure function of the seed. Grammar is kept correct
by storing phrases in the form each slot needs (e.g. German accusative articles, Russian feminine
accusative adjectives) rather than by inflecting.

Japanese is written in kana only (espeak-ng's ja voice does not read kanji); Mandarin in hanzi.

`make_texts(config)` draws every split of `CorpusConfig` (seed 000 Table 1) with DISJOINT texts:
one pool of unique sentences per language, sliced in a fixed order. A share `broad_fraction` of
the sentences comes from large frequency word lists instead (`rvqspec.mini.wordlists`), so that
the recognizer trained on the corpus learns each language's spelling and sound, not the grammar's
few hundred words (issue 14).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rvqspec.mini.speech import LANGUAGES
from rvqspec.mini.wordlists import DEFAULT_WORDS, broad_sentence


def _pick(rng: np.random.Generator, items):
    return items[int(rng.integers(len(items)))]


def _maybe(rng: np.random.Generator, p: float, value: str) -> str:
    return value if rng.random() < p else ""


def _join(*parts: str) -> str:
    return " ".join(p for p in parts if p)


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


# ----------------------------------------------------------------------------------------- English
_EN_NAMES = ["Anna", "Peter", "Maria", "John", "Lucy", "David", "Emma", "Tom", "Sarah", "Michael",
             "Laura", "James", "Kate", "Daniel", "Olivia", "Robert", "Helen", "Mark"]
_EN_PEOPLE = ["my brother", "my sister", "the teacher", "our neighbour", "the old man", "a young woman",
              "the doctor", "her friend", "the little girl", "the farmer", "his mother", "the driver",
              "the cook", "my uncle", "the nurse", "a tall boy"]
_EN_NOUNS = ["apple", "book", "bottle", "car", "bag", "letter", "newspaper", "loaf of bread", "cup",
             "fish", "chair", "table", "window", "door", "key", "notebook", "pencil", "phone", "camera",
             "bicycle", "cake", "box", "ball", "guitar", "piano", "plate", "towel", "shirt", "coat",
             "hat", "umbrella", "clock", "lamp", "map", "ticket", "picture", "flower", "basket", "bucket",
             "jacket", "blanket", "pillow", "radio", "computer", "knife", "spoon", "glass", "candle",
             "envelope", "wallet", "ring", "watch", "shoe", "sock", "carpet", "mirror", "bench", "boat",
             "horse", "dog", "cat", "bird", "orange", "lemon", "potato", "tomato", "onion", "egg",
             "sandwich", "magazine", "dictionary", "blackboard", "ladder", "hammer", "bridge", "garden hose",
             "kettle", "teapot", "suitcase", "backpack", "violin", "drum", "kite", "puzzle", "toy train",
             "bowl", "fork", "pan", "bed", "sofa", "desk", "fence", "gate", "tent", "rope", "stone"]
_EN_ADJ = ["red", "big", "small", "old", "new", "beautiful", "heavy", "light", "cheap", "expensive",
           "green", "blue", "white", "black", "warm", "cold", "fresh", "long", "short", "empty", "full",
           "yellow", "brown", "dark", "clean", "dirty", "soft", "hard", "strange", "lovely", "broken",
           "wooden", "tiny", "huge", "quiet", "bright", "round", "square", "famous", "simple"]
_EN_VERBS = [("buy", "bought"), ("find", "found"), ("see", "saw"), ("open", "opened"),
             ("clean", "cleaned"), ("paint", "painted"), ("carry", "carried"), ("sell", "sold"),
             ("lose", "lost"), ("want", "wanted"), ("need", "needed"), ("read", "read"),
             ("take", "took"), ("bring", "brought"), ("wash", "washed"), ("fix", "fixed"),
             ("order", "ordered"), ("borrow", "borrowed"), ("drop", "dropped"), ("watch", "watched"),
             ("close", "closed"), ("check", "checked"), ("move", "moved"), ("keep", "kept"),
             ("hide", "hid"), ("show", "showed"), ("forget", "forgot"), ("choose", "chose"),
             ("draw", "drew"), ("send", "sent"), ("build", "built"), ("break", "broke")]
_EN_INTRANS = ["slept", "laughed", "waited", "arrived", "smiled", "worked", "danced", "ran", "walked",
               "sang", "stayed", "cried", "swam", "rested", "studied", "played", "cooked", "read quietly"]
_EN_PLACES = ["in the kitchen", "at the station", "near the river", "on the table", "in the garden",
              "at school", "behind the house", "next to the door", "in the office", "at the market",
              "in the city", "in the forest", "at home", "on the beach", "on the train", "in the library",
              "on the street", "in the hospital", "at the shop", "under the bridge", "in the park",
              "on the roof", "in the basement", "at the airport", "by the lake"]
_EN_TIMES = ["yesterday", "this morning", "last week", "on Monday", "at night", "today", "after lunch",
             "in the evening", "two days ago", "on Sunday", "every day", "last summer", "at noon",
             "in the winter", "before dinner", "on Friday"]
_EN_ADV = ["quickly", "slowly", "carefully", "quietly", "happily", "again", "alone", "together"]
_EN_DEGREE = ["very", "quite", "really", "too", "not"]


def _en_np(rng) -> str:
    noun = _pick(rng, _EN_NOUNS)
    adj = _maybe(rng, 0.5, _pick(rng, _EN_ADJ))
    det = _pick(rng, ["a", "the", "my", "her", "his", "that", "this", "our", "a"])
    if det == "a" and (adj or noun)[0] in "aeiou":
        det = "an"
    return _join(det, adj, noun)


def _en_subject(rng) -> str:
    return _pick(rng, _EN_NAMES) if rng.random() < 0.5 else _pick(rng, _EN_PEOPLE)


def _en_sentence(rng) -> str:
    t = int(rng.integers(7))
    if t == 0:
        s = _join(_en_subject(rng), _pick(rng, _EN_VERBS)[1], _en_np(rng),
                  _maybe(rng, 0.6, _pick(rng, _EN_PLACES)), _maybe(rng, 0.4, _pick(rng, _EN_TIMES))) + "."
    elif t == 1:
        s = _join(_en_subject(rng), _pick(rng, _EN_INTRANS), _maybe(rng, 0.4, _pick(rng, _EN_ADV)),
                  _maybe(rng, 0.7, _pick(rng, _EN_PLACES)), _maybe(rng, 0.5, _pick(rng, _EN_TIMES))) + "."
    elif t == 2:
        s = _pick(rng, _EN_TIMES) + ", " + _join(_en_subject(rng), _pick(rng, _EN_VERBS)[1], _en_np(rng)) + "."
    elif t == 3:
        s = _join("the", _maybe(rng, 0.4, _pick(rng, _EN_ADJ)), _pick(rng, _EN_NOUNS),
                  _maybe(rng, 0.5, _pick(rng, _EN_PLACES)), "is", _pick(rng, _EN_DEGREE), _pick(rng, _EN_ADJ)) + "."
    elif t == 4:
        s = _join("where did", _en_subject(rng), _pick(rng, ["put", "leave", "find", "buy"]), _en_np(rng)) + "?"
    elif t == 5:
        s = _join(_en_subject(rng), "said that", _en_subject(rng), _pick(rng, _EN_VERBS)[1], _en_np(rng)) + "."
    else:
        s = _join("did", _en_subject(rng), _pick(rng, _EN_VERBS)[0], _en_np(rng),
                  _maybe(rng, 0.5, _pick(rng, _EN_PLACES)), _pick(rng, _EN_TIMES)) + "?"
    return _cap(s)


# ------------------------------------------------------------------------------------------ German
_DE_NAMES = ["Anna", "Peter", "Lukas", "Marie", "Jonas", "Lena", "Paul", "Sophie", "Felix", "Emma",
             "Max", "Laura", "Tim", "Hanna", "Jan", "Klara", "Moritz", "Greta"]
_DE_PEOPLE = ["mein Bruder", "meine Schwester", "der Lehrer", "die Ärztin", "unser Nachbar",
              "der alte Mann", "die junge Frau", "das kleine Kind", "der Bauer", "die Fahrerin",
              "mein Freund", "seine Mutter", "ihr Vater", "der Koch", "meine Tante", "die Verkäuferin"]
# (noun, gender m/f/n)
_DE_NOUNS = [("Apfel", "m"), ("Buch", "n"), ("Flasche", "f"), ("Auto", "n"), ("Tasche", "f"),
             ("Brief", "m"), ("Zeitung", "f"), ("Brot", "n"), ("Tasse", "f"), ("Fisch", "m"),
             ("Stuhl", "m"), ("Tisch", "m"), ("Fenster", "n"), ("Tür", "f"), ("Schlüssel", "m"),
             ("Heft", "n"), ("Bleistift", "m"), ("Telefon", "n"), ("Kamera", "f"), ("Fahrrad", "n"),
             ("Kuchen", "m"), ("Kiste", "f"), ("Ball", "m"), ("Gitarre", "f"), ("Klavier", "n"),
             ("Teller", "m"), ("Handtuch", "n"), ("Hemd", "n"), ("Mantel", "m"), ("Hut", "m"),
             ("Regenschirm", "m"), ("Uhr", "f"), ("Lampe", "f"), ("Karte", "f"), ("Fahrkarte", "f"),
             ("Bild", "n"), ("Blume", "f"), ("Korb", "m"), ("Eimer", "m"), ("Jacke", "f"),
             ("Decke", "f"), ("Kissen", "n"), ("Radio", "n"), ("Computer", "m"), ("Messer", "n"),
             ("Löffel", "m"), ("Glas", "n"), ("Kerze", "f"), ("Umschlag", "m"), ("Geldbörse", "f"),
             ("Ring", "m"), ("Schuh", "m"), ("Teppich", "m"), ("Spiegel", "m"), ("Bank", "f"),
             ("Boot", "n"), ("Pferd", "n"), ("Hund", "m"), ("Katze", "f"), ("Vogel", "m"),
             ("Orange", "f"), ("Zitrone", "f"), ("Kartoffel", "f"), ("Tomate", "f"), ("Zwiebel", "f"),
             ("Ei", "n"), ("Zeitschrift", "f"), ("Wörterbuch", "n"), ("Leiter", "f"), ("Hammer", "m"),
             ("Kessel", "m"), ("Koffer", "m"), ("Rucksack", "m"), ("Geige", "f"), ("Trommel", "f"),
             ("Drachen", "m"), ("Schüssel", "f"), ("Gabel", "f"), ("Pfanne", "f"), ("Bett", "n"),
             ("Sofa", "n"), ("Zelt", "n"), ("Seil", "n"), ("Stein", "m"), ("Paket", "n")]
_DE_ADJ = ["rot", "groß", "klein", "alt", "neu", "schön", "schwer", "leicht", "billig", "teuer", "grün",
           "blau", "weiß", "schwarz", "warm", "kalt", "frisch", "lang", "kurz", "leer", "voll", "gelb",
           "braun", "sauber", "schmutzig", "weich", "hart", "seltsam", "hell", "rund", "einfach", "laut"]
_DE_VERBS = ["kauft", "findet", "sieht", "öffnet", "putzt", "malt", "trägt", "verkauft", "verliert",
             "braucht", "liest", "nimmt", "bringt", "wäscht", "repariert", "bestellt", "sucht", "holt",
             "zeigt", "schließt", "prüft", "hat", "mag", "baut", "wirft", "hält", "vergisst", "versteckt",
             "schickt", "wählt", "zeichnet", "leiht"]
_DE_INTRANS = ["schläft", "lacht", "wartet", "arbeitet", "tanzt", "läuft", "singt", "schwimmt", "spielt",
               "liest", "ruht sich aus", "kocht", "sitzt", "steht", "lernt", "isst"]
_DE_PLACES = ["im Garten", "in der Küche", "am Bahnhof", "auf dem Tisch", "im Park", "in der Schule",
              "hinter dem Haus", "neben der Tür", "im Büro", "auf dem Markt", "in der Stadt", "am Fluss",
              "im Wald", "zu Hause", "im Keller", "auf dem Dach", "in der Bibliothek", "im Supermarkt",
              "am Strand", "im Zug", "am Flughafen", "am See", "unter der Brücke", "im Krankenhaus"]
_DE_TIMES = ["heute", "gestern", "morgen früh", "am Montag", "am Abend", "jeden Tag", "in der Nacht",
             "nach dem Essen", "am Wochenende", "um acht Uhr", "im Sommer", "im Winter", "oft",
             "manchmal", "am Sonntag", "am Mittag"]
_DE_DEGREE = ["sehr", "ziemlich", "wirklich", "zu", "nicht"]
# accusative article forms: definite, indefinite, possessive "mein"
_DE_ACC = {"m": ["den", "einen", "meinen", "ihren"], "f": ["die", "eine", "meine", "ihre"],
           "n": ["das", "ein", "mein", "ihr"]}
_DE_NOM_DEF = {"m": "der", "f": "die", "n": "das"}


def _de_acc_np(rng) -> str:
    noun, g = _pick(rng, _DE_NOUNS)
    det = _pick(rng, _DE_ACC[g])
    if rng.random() < 0.5:
        return _join(det, noun)
    adj = _pick(rng, _DE_ADJ)
    if det in ("den", "einen", "meinen", "ihren"):
        ending = "en"  # masculine accusative: -en after any article
    elif det in ("die", "das", "eine", "meine", "ihre"):
        ending = "e"
    else:  # ein / mein / ihr before a neuter noun: strong ending
        ending = "es"
    stem = adj[:-2] + "r" if adj.endswith("er") else adj  # teuer -> teure, teuren
    return _join(det, stem + ending, noun)


def _de_subject(rng) -> str:
    return _pick(rng, _DE_NAMES) if rng.random() < 0.5 else _pick(rng, _DE_PEOPLE)


def _de_sentence(rng) -> str:
    t = int(rng.integers(6))
    if t == 0:
        s = _join(_de_subject(rng), _pick(rng, _DE_VERBS), _maybe(rng, 0.4, _pick(rng, _DE_TIMES)),
                  _de_acc_np(rng), _maybe(rng, 0.6, _pick(rng, _DE_PLACES))) + "."
    elif t == 1:
        s = _join(_de_subject(rng), _pick(rng, _DE_INTRANS), _maybe(rng, 0.5, _pick(rng, _DE_TIMES)),
                  _maybe(rng, 0.7, _pick(rng, _DE_PLACES))) + "."
    elif t == 2:  # verb second: time first, then verb, then subject
        s = _join(_pick(rng, _DE_TIMES), _pick(rng, _DE_VERBS), _de_subject(rng), _de_acc_np(rng)) + "."
    elif t == 3:
        noun, g = _pick(rng, _DE_NOUNS)
        s = _join(_DE_NOM_DEF[g], noun, _maybe(rng, 0.4, _pick(rng, _DE_PLACES)), "ist",
                  _pick(rng, _DE_DEGREE), _pick(rng, _DE_ADJ)) + "."
    elif t == 4:
        s = _join("warum", _pick(rng, _DE_VERBS), _de_subject(rng), _de_acc_np(rng),
                  _maybe(rng, 0.5, _pick(rng, _DE_PLACES))) + "?"
    else:
        s = _join(_de_subject(rng), "sagt, dass", _de_subject(rng), _de_acc_np(rng), _pick(rng, _DE_VERBS)) + "."
    return _cap(s)


# ----------------------------------------------------------------------------------------- Spanish
_ES_NAMES = ["Ana", "Pedro", "María", "Juan", "Lucía", "Carlos", "Sofía", "Miguel", "Elena", "Pablo",
             "Carmen", "Diego", "Laura", "Javier", "Isabel", "Andrés", "Marta", "Luis"]
_ES_PEOPLE = ["mi hermano", "mi hermana", "el profesor", "la doctora", "nuestro vecino", "el niño",
              "la niña", "el viejo", "la mujer", "su madre", "tu padre", "el conductor", "la cocinera",
              "mi amigo", "mi tía", "el camarero"]
_ES_NOUNS = [("manzana", "f"), ("libro", "m"), ("botella", "f"), ("coche", "m"), ("bolsa", "f"),
             ("carta", "f"), ("periódico", "m"), ("pan", "m"), ("taza", "f"), ("pescado", "m"),
             ("silla", "f"), ("mesa", "f"), ("ventana", "f"), ("puerta", "f"), ("llave", "f"),
             ("cuaderno", "m"), ("lápiz", "m"), ("teléfono", "m"), ("cámara", "f"), ("bicicleta", "f"),
             ("pastel", "m"), ("caja", "f"), ("pelota", "f"), ("guitarra", "f"), ("piano", "m"),
             ("plato", "m"), ("toalla", "f"), ("camisa", "f"), ("abrigo", "m"), ("sombrero", "m"),
             ("paraguas", "m"), ("reloj", "m"), ("lámpara", "f"), ("mapa", "m"), ("billete", "m"),
             ("cuadro", "m"), ("flor", "f"), ("cesta", "f"), ("cubo", "m"), ("chaqueta", "f"),
             ("manta", "f"), ("almohada", "f"), ("radio", "f"), ("ordenador", "m"), ("cuchillo", "m"),
             ("cuchara", "f"), ("vaso", "m"), ("vela", "f"), ("sobre", "m"), ("cartera", "f"),
             ("anillo", "m"), ("zapato", "m"), ("alfombra", "f"), ("espejo", "m"), ("banco", "m"),
             ("barco", "m"), ("caballo", "m"), ("perro", "m"), ("gato", "m"), ("pájaro", "m"),
             ("naranja", "f"), ("limón", "m"), ("patata", "f"), ("tomate", "m"), ("cebolla", "f"),
             ("huevo", "m"), ("revista", "f"), ("diccionario", "m"), ("escalera", "f"), ("martillo", "m"),
             ("maleta", "f"), ("mochila", "f"), ("violín", "m"), ("tambor", "m"), ("cometa", "f"),
             ("cuenco", "m"), ("tenedor", "m"), ("sartén", "f"), ("cama", "f"), ("sofá", "m"),
             ("tienda de campaña", "f"), ("cuerda", "f"), ("piedra", "f"), ("paquete", "m")]
# adjectives as (masculine, feminine)
_ES_ADJ = [("rojo", "roja"), ("grande", "grande"), ("pequeño", "pequeña"), ("viejo", "vieja"),
           ("nuevo", "nueva"), ("bonito", "bonita"), ("blanco", "blanca"), ("negro", "negra"),
           ("verde", "verde"), ("azul", "azul"), ("caro", "cara"), ("barato", "barata"),
           ("limpio", "limpia"), ("sucio", "sucia"), ("lleno", "llena"), ("vacío", "vacía"),
           ("frío", "fría"), ("caliente", "caliente"), ("largo", "larga"), ("corto", "corta"),
           ("pesado", "pesada"), ("suave", "suave"), ("amarillo", "amarilla"), ("alto", "alta"),
           ("bajo", "baja"), ("hermoso", "hermosa"), ("raro", "rara"), ("redondo", "redonda"),
           ("marrón", "marrón"), ("oscuro", "oscura")]
_ES_VERBS = ["compra", "encuentra", "abre", "limpia", "pinta", "lleva", "vende", "pierde", "necesita",
             "lee", "escribe", "toma", "trae", "lava", "arregla", "pide", "busca", "quiere", "tiene",
             "guarda", "cierra", "mira", "prepara", "usa", "rompe", "recoge", "prueba", "sube", "esconde",
             "envía", "elige", "dibuja"]
_ES_INTRANS = ["duerme", "ríe", "espera", "trabaja", "baila", "corre", "canta", "nada", "juega",
               "descansa", "camina", "llora", "estudia", "come", "cocina", "lee"]
_ES_PLACES = ["en la cocina", "en el jardín", "en la estación", "sobre la mesa", "en el parque",
              "en la escuela", "detrás de la casa", "junto a la puerta", "en la oficina", "en el mercado",
              "en la ciudad", "cerca del río", "en el bosque", "en casa", "en la playa", "en el tren",
              "en la biblioteca", "en la calle", "en el hospital", "en la tienda", "en el aeropuerto",
              "junto al lago", "debajo del puente", "en el tejado"]
_ES_TIMES = ["hoy", "ayer", "mañana", "el lunes", "por la tarde", "por la noche", "cada día",
             "esta mañana", "el fin de semana", "a las ocho", "en verano", "en invierno", "a menudo",
             "a veces", "el domingo", "al mediodía"]
_ES_DEGREE = ["muy", "bastante", "demasiado", "realmente", "un poco"]
_ES_DET = {"m": ["el", "un", "mi", "este", "su"], "f": ["la", "una", "mi", "esta", "su"]}
_ES_DEF = {"m": "el", "f": "la"}


def _es_np(rng, det=None) -> str:
    noun, g = _pick(rng, _ES_NOUNS)
    det = det or _pick(rng, _ES_DET[g])
    if isinstance(det, dict):
        det = det[g]
    adj = _pick(rng, _ES_ADJ)[0 if g == "m" else 1]
    return _join(det, noun, _maybe(rng, 0.5, adj))


def _es_subject(rng) -> str:
    return _pick(rng, _ES_NAMES) if rng.random() < 0.5 else _pick(rng, _ES_PEOPLE)


def _es_sentence(rng) -> str:
    t = int(rng.integers(6))
    if t == 0:
        s = _join(_es_subject(rng), _pick(rng, _ES_VERBS), _es_np(rng),
                  _maybe(rng, 0.6, _pick(rng, _ES_PLACES)), _maybe(rng, 0.4, _pick(rng, _ES_TIMES))) + "."
    elif t == 1:
        s = _join(_es_subject(rng), _pick(rng, _ES_INTRANS), _maybe(rng, 0.7, _pick(rng, _ES_PLACES)),
                  _maybe(rng, 0.5, _pick(rng, _ES_TIMES))) + "."
    elif t == 2:
        s = _pick(rng, _ES_TIMES) + ", " + _join(_es_subject(rng), _pick(rng, _ES_VERBS), _es_np(rng)) + "."
    elif t == 3:
        noun, g = _pick(rng, _ES_NOUNS)
        adj = _pick(rng, _ES_ADJ)[0 if g == "m" else 1]
        s = _join(_ES_DEF[g], noun, _maybe(rng, 0.4, _pick(rng, _ES_PLACES)), "es",
                  _pick(rng, _ES_DEGREE), adj) + "."
    elif t == 4:
        s = "¿" + _cap(_join("dónde está", _es_np(rng, det=_ES_DEF))) + "?"
        return s
    else:
        s = _join(_es_subject(rng), "dice que", _es_subject(rng), _pick(rng, _ES_VERBS), _es_np(rng)) + "."
    return _cap(s)


# ----------------------------------------------------------------------------------------- Russian
_RU_NAMES = ["Анна", "Иван", "Мария", "Пётр", "Ольга", "Сергей", "Наташа", "Михаил", "Елена",
             "Дмитрий", "Татьяна", "Алексей", "Ирина", "Николай", "Светлана", "Андрей", "Юлия", "Борис"]
_RU_PEOPLE = ["мой брат", "моя сестра", "учитель", "врач", "наш сосед", "старик", "девочка", "мальчик",
              "его мать", "её отец", "водитель", "мой друг", "повар", "моя тётя", "продавец", "бабушка"]
# inanimate nouns: (nominative, gender, accusative)
_RU_NOUNS = [("яблоко", "n", "яблоко"), ("книга", "f", "книгу"), ("бутылка", "f", "бутылку"),
             ("машина", "f", "машину"), ("сумка", "f", "сумку"), ("письмо", "n", "письмо"),
             ("газета", "f", "газету"), ("хлеб", "m", "хлеб"), ("чашка", "f", "чашку"),
             ("стул", "m", "стул"), ("стол", "m", "стол"), ("окно", "n", "окно"), ("дверь", "f", "дверь"),
             ("ключ", "m", "ключ"), ("тетрадь", "f", "тетрадь"), ("карандаш", "m", "карандаш"),
             ("телефон", "m", "телефон"), ("камера", "f", "камеру"), ("велосипед", "m", "велосипед"),
             ("торт", "m", "торт"), ("коробка", "f", "коробку"), ("мяч", "m", "мяч"),
             ("гитара", "f", "гитару"), ("тарелка", "f", "тарелку"), ("полотенце", "n", "полотенце"),
             ("рубашка", "f", "рубашку"), ("пальто", "n", "пальто"), ("шляпа", "f", "шляпу"),
             ("зонт", "m", "зонт"), ("часы", "m", "часы"), ("лампа", "f", "лампу"), ("карта", "f", "карту"),
             ("билет", "m", "билет"), ("картина", "f", "картину"), ("цветок", "m", "цветок"),
             ("корзина", "f", "корзину"), ("ведро", "n", "ведро"), ("куртка", "f", "куртку"),
             ("одеяло", "n", "одеяло"), ("подушка", "f", "подушку"), ("радио", "n", "радио"),
             ("компьютер", "m", "компьютер"), ("нож", "m", "нож"), ("ложка", "f", "ложку"),
             ("стакан", "m", "стакан"), ("свеча", "f", "свечу"), ("конверт", "m", "конверт"),
             ("кошелёк", "m", "кошелёк"), ("кольцо", "n", "кольцо"), ("ботинок", "m", "ботинок"),
             ("ковёр", "m", "ковёр"), ("зеркало", "n", "зеркало"), ("лодка", "f", "лодку"),
             ("апельсин", "m", "апельсин"), ("лимон", "m", "лимон"), ("помидор", "m", "помидор"),
             ("яйцо", "n", "яйцо"), ("журнал", "m", "журнал"), ("словарь", "m", "словарь"),
             ("лестница", "f", "лестницу"), ("молоток", "m", "молоток"), ("чайник", "m", "чайник"),
             ("чемодан", "m", "чемодан"), ("рюкзак", "m", "рюкзак"), ("скрипка", "f", "скрипку"),
             ("барабан", "m", "барабан"), ("миска", "f", "миску"), ("вилка", "f", "вилку"),
             ("сковорода", "f", "сковороду"), ("кровать", "f", "кровать"), ("диван", "m", "диван"),
             ("палатка", "f", "палатку"), ("верёвка", "f", "верёвку"), ("камень", "m", "камень"),
             ("посылка", "f", "посылку"), ("кастрюля", "f", "кастрюлю")]
# adjectives: (masculine, feminine, neuter, feminine accusative)
_RU_ADJ = [("красный", "красная", "красное", "красную"), ("большой", "большая", "большое", "большую"),
           ("маленький", "маленькая", "маленькое", "маленькую"), ("старый", "старая", "старое", "старую"),
           ("новый", "новая", "новое", "новую"), ("красивый", "красивая", "красивое", "красивую"),
           ("тяжёлый", "тяжёлая", "тяжёлое", "тяжёлую"), ("лёгкий", "лёгкая", "лёгкое", "лёгкую"),
           ("дешёвый", "дешёвая", "дешёвое", "дешёвую"), ("дорогой", "дорогая", "дорогое", "дорогую"),
           ("зелёный", "зелёная", "зелёное", "зелёную"), ("синий", "синяя", "синее", "синюю"),
           ("белый", "белая", "белое", "белую"), ("чёрный", "чёрная", "чёрное", "чёрную"),
           ("тёплый", "тёплая", "тёплое", "тёплую"), ("холодный", "холодная", "холодное", "холодную"),
           ("свежий", "свежая", "свежее", "свежую"), ("длинный", "длинная", "длинное", "длинную"),
           ("короткий", "короткая", "короткое", "короткую"), ("пустой", "пустая", "пустое", "пустую"),
           ("полный", "полная", "полное", "полную"), ("жёлтый", "жёлтая", "жёлтое", "жёлтую"),
           ("чистый", "чистая", "чистое", "чистую"), ("грязный", "грязная", "грязное", "грязную"),
           ("мягкий", "мягкая", "мягкое", "мягкую"), ("твёрдый", "твёрдая", "твёрдое", "твёрдую"),
           ("странный", "странная", "странное", "странную"), ("круглый", "круглая", "круглое", "круглую")]
_RU_VERBS = ["покупает", "находит", "видит", "открывает", "моет", "рисует", "несёт", "продаёт",
             "теряет", "читает", "берёт", "приносит", "чинит", "ищет", "хочет", "держит", "закрывает",
             "проверяет", "любит", "убирает", "показывает", "ставит", "получает", "забывает", "выбирает",
             "прячет", "отправляет", "кладёт", "достаёт", "нюхает"]
_RU_INTRANS = ["спит", "смеётся", "ждёт", "работает", "танцует", "бегает", "поёт", "плавает", "играет",
               "отдыхает", "гуляет", "плачет", "учится", "читает", "готовит", "сидит"]
_RU_PLACES = ["в саду", "на кухне", "на вокзале", "на столе", "в парке", "в школе", "за домом",
              "у двери", "в офисе", "на рынке", "в городе", "у реки", "в лесу", "дома", "на пляже",
              "в поезде", "в библиотеке", "на улице", "в больнице", "в магазине", "в аэропорту",
              "у озера", "под мостом", "на крыше"]
_RU_TIMES = ["сегодня", "вчера", "завтра", "в понедельник", "вечером", "ночью", "каждый день", "утром",
             "в выходные", "в восемь часов", "летом", "зимой", "часто", "иногда", "в воскресенье", "днём"]
_RU_DEGREE = ["очень", "довольно", "слишком", "совсем не", "не"]
_RU_POSS = {"m": ["мой", "этот", "наш"], "f": ["мою", "эту", "нашу"], "n": ["моё", "это", "наше"]}


def _ru_acc_np(rng) -> str:
    nom, g, acc = _pick(rng, _RU_NOUNS)
    det = _maybe(rng, 0.3, _pick(rng, _RU_POSS[g]))
    adj = ""
    if rng.random() < 0.5:
        forms = _pick(rng, _RU_ADJ)
        adj = {"m": forms[0], "f": forms[3], "n": forms[2]}[g]  # inanimate: masc./neut. acc. = nom.
    return _join(det, adj, acc)


def _ru_subject(rng) -> str:
    return _pick(rng, _RU_NAMES) if rng.random() < 0.5 else _pick(rng, _RU_PEOPLE)


def _ru_sentence(rng) -> str:
    t = int(rng.integers(6))
    if t == 0:
        s = _join(_ru_subject(rng), _maybe(rng, 0.4, _pick(rng, _RU_TIMES)), _pick(rng, _RU_VERBS),
                  _ru_acc_np(rng), _maybe(rng, 0.6, _pick(rng, _RU_PLACES))) + "."
    elif t == 1:
        s = _join(_ru_subject(rng), _pick(rng, _RU_INTRANS), _maybe(rng, 0.7, _pick(rng, _RU_PLACES)),
                  _maybe(rng, 0.5, _pick(rng, _RU_TIMES))) + "."
    elif t == 2:
        s = _pick(rng, _RU_TIMES) + " " + _join(_ru_subject(rng), _pick(rng, _RU_VERBS), _ru_acc_np(rng)) + "."
    elif t == 3:
        nom, g, _ = _pick(rng, _RU_NOUNS)
        forms = _pick(rng, _RU_ADJ)
        adj = {"m": forms[0], "f": forms[1], "n": forms[2]}[g]
        s = _join(nom, _maybe(rng, 0.4, _pick(rng, _RU_PLACES)), _pick(rng, _RU_DEGREE), adj) + "."
    elif t == 4:
        s = _join("почему", _ru_subject(rng), _pick(rng, _RU_VERBS), _ru_acc_np(rng)) + "?"
    else:
        s = _join(_ru_subject(rng), "говорит, что", _ru_subject(rng), _pick(rng, _RU_VERBS), _ru_acc_np(rng)) + "."
    return _cap(s)


# ------------------------------------------------------------------------------- Japanese (kana)
_JA_NAMES = ["たなかさん", "すずきさん", "さとうさん", "やまださん", "はなこさん", "たろうくん", "ゆきさん",
             "けんじさん", "あきこさん", "ひろしさん", "まりさん", "ゆうたくん", "さくらさん", "だいすけさん"]
_JA_PEOPLE = ["わたし", "ともだち", "せんせい", "おかあさん", "おとうさん", "あに", "あね", "いしゃ",
              "こども", "となりのひと", "おばあさん", "おじいさん", "てんいん", "がくせい"]
_JA_NOUNS = ["りんご", "ほん", "みず", "くるま", "かばん", "てがみ", "しんぶん", "パン", "おちゃ", "コーヒー",
             "さかな", "にく", "やさい", "たまご", "かさ", "くつ", "ぼうし", "とけい", "でんわ", "しゃしん",
             "はな", "いす", "つくえ", "まど", "ドア", "かぎ", "ノート", "えんぴつ", "ペン", "テレビ",
             "ラジオ", "カメラ", "じてんしゃ", "ごはん", "おかし", "ケーキ", "ジュース", "ぎゅうにゅう",
             "くすり", "ふく", "シャツ", "ざっし", "ちず", "きっぷ", "はこ", "おもちゃ", "ボール", "ギター",
             "コップ", "さら", "はし", "なべ", "タオル", "せっけん", "めがね", "てぶくろ", "まくら", "ふとん",
             "かがみ", "ろうそく", "ふうとう", "さいふ", "ゆびわ", "バナナ", "みかん", "レモン", "トマト",
             "じしょ", "はしご", "かなづち", "スーツケース", "リュック", "たいこ", "フォーク", "スプーン",
             "ソファ", "テント", "ロープ", "いし", "にもつ", "おにぎり", "すし", "そば", "うどん"]
_JA_ADJ = ["あかい", "あおい", "しろい", "くろい", "おおきい", "ちいさい", "あたらしい", "ふるい", "たかい",
           "やすい", "おもい", "かるい", "ながい", "みじかい", "あたたかい", "つめたい", "きれいな", "へんな",
           "まるい", "かわいい", "おいしい", "きいろい", "あかるい", "くらい", "やわらかい", "かたい"]
_JA_VERBS = ["かいます", "みます", "よみます", "かきます", "たべます", "のみます", "あらいます",
             "つくります", "もちます", "あけます", "しめます", "さがします", "つかいます", "うります",
             "わすれます", "ひろいます", "もらいます", "えらびます", "はこびます", "かくします",
             "おくります", "なおします", "とります", "すてます", "かります", "かえします"]
_JA_INTRANS = ["ねます", "わらいます", "まちます", "はたらきます", "おどります", "はしります",
               "うたいます", "およぎます", "あそびます", "やすみます", "あるきます", "なきます",
               "べんきょうします", "りょうりします", "すわります"]
_JA_PLACES = ["いえで", "がっこうで", "えきで", "こうえんで", "みせで", "としょかんで", "だいどころで",
              "にわで", "かいしゃで", "びょういんで", "レストランで", "うみで", "やまで", "まちで",
              "でんしゃで", "くうこうで", "かわのそばで", "はしのしたで", "へやで", "きょうしつで"]
_JA_TIMES = ["きょう", "きのう", "あした", "あさ", "よる", "まいにち", "げつようびに", "しゅうまつに",
             "ときどき", "よく", "いま", "ごごに", "なつに", "ふゆに", "はちじに", "にちようびに"]
_JA_DEGREE = ["とても", "すこし", "ほんとうに", "かなり"]


def _ja_obj(rng) -> str:
    return _maybe(rng, 0.5, _pick(rng, _JA_ADJ)) + _pick(rng, _JA_NOUNS)


def _ja_subject(rng) -> str:
    return _pick(rng, _JA_NAMES) if rng.random() < 0.5 else _pick(rng, _JA_PEOPLE)


def _ja_sentence(rng) -> str:
    # words joined without spaces, as Japanese is written (and as Fleurs ja transcripts are)
    t = int(rng.integers(5))
    if t == 0:
        s = (_ja_subject(rng) + "は" + _maybe(rng, 0.5, _pick(rng, _JA_TIMES)) + _maybe(rng, 0.6, _pick(rng, _JA_PLACES))
             + _ja_obj(rng) + "を" + _pick(rng, _JA_VERBS) + "。")
    elif t == 1:
        s = (_ja_subject(rng) + "は" + _maybe(rng, 0.5, _pick(rng, _JA_TIMES)) + _maybe(rng, 0.7, _pick(rng, _JA_PLACES))
             + _pick(rng, _JA_INTRANS) + "。")
    elif t == 2:
        adj = _pick(rng, _JA_ADJ)
        adj = adj[:-1] if adj.endswith("な") else adj  # predicative na-adjective drops な
        s = "この" + _pick(rng, _JA_NOUNS) + "は" + _pick(rng, _JA_DEGREE) + adj + "です。"
    elif t == 3:
        s = _ja_subject(rng) + "は" + _pick(rng, _JA_TIMES) + "なにを" + _pick(rng, _JA_VERBS) + "か。"
    else:
        s = _ja_obj(rng) + "は" + _pick(rng, _JA_PLACES)[:-1] + "に" + "あります。"
    return s


# ------------------------------------------------------------------------------ Mandarin (hanzi)
_ZH_NAMES = ["小明", "小红", "王老师", "李医生", "张先生", "刘女士", "陈阿姨", "赵叔叔", "小华", "小丽",
             "老张", "小王", "周同学", "林经理"]
_ZH_PEOPLE = ["我", "你", "他", "她", "我们", "我哥哥", "我妹妹", "我朋友", "他妈妈", "她爸爸", "老师",
              "邻居", "司机", "孩子们"]
# (noun, measure word)
_ZH_NOUNS = [("苹果", "个"), ("书", "本"), ("水", "杯"), ("车", "辆"), ("包", "个"), ("信", "封"),
             ("报纸", "份"), ("面包", "个"), ("茶", "杯"), ("鱼", "条"), ("椅子", "把"), ("桌子", "张"),
             ("钥匙", "把"), ("本子", "个"), ("铅笔", "支"), ("手机", "部"), ("相机", "台"),
             ("自行车", "辆"), ("蛋糕", "块"), ("箱子", "个"), ("球", "个"), ("吉他", "把"), ("盘子", "个"),
             ("毛巾", "条"), ("衬衫", "件"), ("大衣", "件"), ("帽子", "顶"), ("雨伞", "把"), ("手表", "块"),
             ("灯", "盏"), ("地图", "张"), ("票", "张"), ("画", "幅"), ("花", "朵"), ("篮子", "个"),
             ("夹克", "件"), ("被子", "条"), ("枕头", "个"), ("收音机", "台"), ("电脑", "台"), ("刀", "把"),
             ("勺子", "个"), ("杯子", "个"), ("蜡烛", "支"), ("信封", "个"), ("钱包", "个"), ("戒指", "枚"),
             ("鞋", "双"), ("地毯", "块"), ("镜子", "面"), ("船", "条"), ("马", "匹"), ("狗", "只"),
             ("猫", "只"), ("鸟", "只"), ("橙子", "个"), ("柠檬", "个"), ("土豆", "个"), ("西红柿", "个"),
             ("鸡蛋", "个"), ("杂志", "本"), ("词典", "本"), ("梯子", "把"), ("锤子", "把"), ("水壶", "个"),
             ("行李箱", "个"), ("背包", "个"), ("小提琴", "把"), ("鼓", "面"), ("风筝", "个"), ("碗", "个"),
             ("叉子", "把"), ("锅", "口"), ("床", "张"), ("沙发", "张"), ("帐篷", "顶"), ("绳子", "根"),
             ("石头", "块"), ("包裹", "个"), ("饺子", "盘"), ("米饭", "碗"), ("面条", "碗")]
_ZH_ADJ_ATTR = ["红色的", "新的", "旧的", "大", "小", "漂亮的", "便宜的", "贵的", "干净的", "白色的",
                "黑色的", "好看的", "很重的", "很轻的", "蓝色的", "绿色的", "黄色的", "奇怪的", "圆的", "长长的"]
_ZH_ADJ_PRED = ["大", "小", "新", "旧", "贵", "便宜", "漂亮", "干净", "重", "轻", "好", "长", "短", "冷",
                "热", "脏", "软", "硬", "奇怪", "可爱"]
_ZH_VERBS = ["买了", "看了", "找到了", "打开了", "洗了", "画了", "带了", "卖了", "丢了", "读了", "写了",
             "拿了", "送了", "修了", "做了", "借了", "收拾了", "检查了", "搬了", "吃了", "喝了", "用了",
             "选了", "准备了", "寄了", "藏了", "扔了", "捡了"]
_ZH_INTRANS = ["睡觉", "笑了", "等着", "工作", "跳舞", "跑步", "唱歌", "游泳", "玩", "休息", "散步", "哭了",
               "学习", "做饭", "看书"]
_ZH_PLACES = ["在家里", "在学校", "在车站", "在公园", "在商店", "在图书馆", "在厨房", "在花园", "在公司",
              "在医院", "在饭馆", "在海边", "在山上", "在城里", "在火车上", "在机场", "在河边", "在桥下",
              "在房间里", "在教室里"]
_ZH_TIMES = ["今天", "昨天", "明天", "早上", "晚上", "每天", "星期一", "周末", "有时候", "现在", "下午",
             "夏天", "冬天", "八点", "星期天"]
_ZH_DEGREE = ["很", "非常", "有点", "太", "不"]
_ZH_NUM = ["一", "两", "三", "这", "那"]


def _zh_obj(rng) -> str:
    noun, mw = _pick(rng, _ZH_NOUNS)
    return _pick(rng, _ZH_NUM) + mw + _maybe(rng, 0.5, _pick(rng, _ZH_ADJ_ATTR)) + noun


def _zh_subject(rng) -> str:
    return _pick(rng, _ZH_NAMES) if rng.random() < 0.5 else _pick(rng, _ZH_PEOPLE)


def _zh_sentence(rng) -> str:
    t = int(rng.integers(5))
    if t == 0:
        s = (_zh_subject(rng) + _maybe(rng, 0.5, _pick(rng, _ZH_TIMES)) + _maybe(rng, 0.6, _pick(rng, _ZH_PLACES))
             + _pick(rng, _ZH_VERBS) + _zh_obj(rng) + "。")
    elif t == 1:
        s = (_zh_subject(rng) + _maybe(rng, 0.5, _pick(rng, _ZH_TIMES)) + _maybe(rng, 0.7, _pick(rng, _ZH_PLACES))
             + _pick(rng, _ZH_INTRANS) + "。")
    elif t == 2:
        noun, mw = _pick(rng, _ZH_NOUNS)
        s = _pick(rng, ["这", "那"]) + mw + noun + _pick(rng, _ZH_DEGREE) + _pick(rng, _ZH_ADJ_PRED) + "。"
    elif t == 3:
        noun, _ = _pick(rng, _ZH_NOUNS)
        s = _zh_subject(rng) + "的" + noun + "在哪里？"
    else:
        s = _zh_subject(rng) + "为什么" + _maybe(rng, 0.5, _pick(rng, _ZH_TIMES)) + _pick(rng, _ZH_VERBS) + _zh_obj(rng) + "？"
    return s


_GENERATORS = {"en": _en_sentence, "de": _de_sentence, "es": _es_sentence, "ru": _ru_sentence,
               "ja": _ja_sentence, "zh": _zh_sentence}
assert tuple(_GENERATORS) == LANGUAGES


# Sentence length bounds: 4-12 words where words are spaced; characters for ja (kana) and zh (hanzi),
# chosen to give utterances of about the same duration as the spaced languages.
MIN_WORDS, MAX_WORDS = 4, 12
_CHAR_BOUNDS = {"ja": (10, 40), "zh": (6, 24)}


def sentence_length_ok(text: str, lang: str) -> bool:
    if lang in _CHAR_BOUNDS:
        lo, hi = _CHAR_BOUNDS[lang]
        return lo <= len(text) <= hi
    return MIN_WORDS <= len(text.split()) <= MAX_WORDS


def sentence(lang: str, rng: np.random.Generator) -> str:
    """One sentence in `lang` drawn from that language's grammar, within the length bounds."""
    if lang not in _GENERATORS:
        raise ValueError(f"unknown language {lang!r}; the mini world speaks {', '.join(LANGUAGES)}")
    while True:  # rejection sampling: every template can produce an in-bounds sentence
        s = _GENERATORS[lang](rng)
        if sentence_length_ok(s, lang):
            return s


def draw_sentence(lang: str, rng: np.random.Generator, config: "CorpusConfig") -> str:
    """A word-list sentence with probability `config.broad_fraction`, else a grammar sentence."""
    if config.broad_fraction > 0 and rng.random() < config.broad_fraction:
        while True:
            s = broad_sentence(lang, rng, config.broad_words)
            if sentence_length_ok(s, lang):
                return s
    return sentence(lang, rng)


# ---------------------------------------------------------------------------------------- splits
# split name -> what it stands for in seed 000 Table 1
SPLITS: dict[str, str] = {
    "model_train": "all six languages; the mini model's and recognizer's own training data "
                   "(the analogue of Qwen3-TTS pre-training)",
    "train": "English; trains the drafter offsets (VoxPopuli train)",
    "validation": "English; validates the drafter offsets (VoxPopuli, disjoint subset)",
    "calibration": "English; selects the sparse tree (LibriSpeech test-clean)",
    "eval": "all six languages; acceptance and WER/CER (Fleurs)",
}


@dataclass(frozen=True)
class CorpusConfig:
    """How many sentences each split gets (per language where the split is multilingual)."""

    model_train_per_language: int = 3000
    # languages whose model_train split gets another size than model_train_per_language, e.g.
    # {"en": 6000}: the talker's free-running errors sit on text contexts it never saw in training
    # (docs/design.md, "Three times the data and the steps together"), and English carries the targets
    model_train_by_language: dict = field(default_factory=dict)
    train: int = 1000
    validation: int = 150
    calibration: int = 150
    eval_per_language: int = 80
    languages: tuple[str, ...] = LANGUAGES
    seed: int = 0
    # share of sentences drawn from the frequency word lists (the rest from the grammars): half
    # keeps the grammars' fluent sentences for the talker and gives the recognizer open vocabulary
    broad_fraction: float = 0.5
    broad_words: int = DEFAULT_WORDS  # ranks of each frequency list the word-list sentences use
    # phonemes per frame in the talker's tokens (rvqspec.mini.phonemes): 2 = the pair at 1/4 and
    # 3/4, 4 = quarter-resolved (where in the frame a boundary falls)
    tokenizer_points: int = 4  # the mini world v4's (2: v3's)
    split_languages: dict = field(default_factory=lambda: {
        "model_train": "all", "train": "en", "validation": "en", "calibration": "en", "eval": "all"})

    def __post_init__(self):
        unknown = sorted(set(self.model_train_by_language) - set(self.languages))
        if unknown:
            raise ValueError(f"CorpusConfig.model_train_by_language names {unknown}, not among the languages "
                             f"{', '.join(self.languages)}")

    @classmethod
    def toy(cls) -> "CorpusConfig":
        """A few sentences per split: CI smoke tests run in seconds."""
        return cls(model_train_per_language=6, train=8, validation=3, calibration=3, eval_per_language=2)

    def counts(self, lang: str) -> dict[str, int]:
        """Split -> number of sentences in language `lang` (0 where the split is English only)."""
        per = {"model_train": self.model_train_by_language.get(lang, self.model_train_per_language),
               "train": self.train, "validation": self.validation, "calibration": self.calibration,
               "eval": self.eval_per_language}
        out = {}
        for split, n in per.items():
            langs = self.split_languages[split]
            out[split] = n if langs == "all" or lang == langs else 0
        return out


@dataclass(frozen=True)
class TextItem:
    id: str
    text: str
    language: str
    split: str


def make_texts(config: CorpusConfig = CorpusConfig()) -> list[TextItem]:
    """All corpus sentences, every split, with texts disjoint across splits (within a language).

    Each language draws from its own Generator (seeded from `config.seed` and the language), so
    adding a language or resizing one leaves the others' sentences unchanged.
    """
    items: list[TextItem] = []
    for li, lang in enumerate(config.languages):
        if lang not in _GENERATORS:
            raise ValueError(f"CorpusConfig.languages has unknown language {lang!r}")
        counts = config.counts(lang)
        need = sum(counts.values())
        rng = np.random.default_rng([config.seed, li])
        seen: set[str] = set()
        pool: list[str] = []
        attempts = 0
        while len(pool) < need:
            attempts += 1
            if attempts > 50 * need + 1000:
                raise RuntimeError(f"the {lang} grammar gave only {len(pool)} unique sentences of {need} "
                                   "needed; enlarge its word lists or shrink CorpusConfig")
            s = draw_sentence(lang, rng, config)
            if s not in seen:
                seen.add(s)
                pool.append(s)
        # fixed order of slicing: held-out splits first, so resizing model_train never moves them
        start = 0
        for split in ("eval", "calibration", "validation", "train", "model_train"):
            for k, text in enumerate(pool[start:start + counts[split]]):
                items.append(TextItem(id=f"{split}-{lang}-{k:05d}", text=text, language=lang, split=split))
            start += counts[split]
    return items
