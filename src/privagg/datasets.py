"""The bundled datasets: English words drawn from real word frequencies, and handwritten digits as vectors.

No download at run time: the frequencies are the ``wordfreq`` package's
English list (its own bundled data, a blend of Wikipedia, subtitles, news,
books, web text, Twitter and Reddit). Each simulated user holds one word,
drawn independently with probability proportional to its frequency among the
``vocabulary`` most common words, so the counts have the heavy Zipf-like skew
of real telemetry. The vocabulary itself is public: it is the dataset's
default candidate list, which lets reports name the words.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

DEFAULT_USERS = 100_000
DEFAULT_VOCABULARY = 20_000
DEFAULT_SEED = 2022
DESCRIPTION = (f"{DEFAULT_USERS} users, one English word each, drawn from wordfreq's frequencies of the "
               f"{DEFAULT_VOCABULARY} most common words (seed {DEFAULT_SEED})")


def english_vocabulary(vocabulary: int = DEFAULT_VOCABULARY) -> pa.ChunkedArray:
    """The ``vocabulary`` most common English words: public, so they serve as candidates and labels."""
    import wordfreq

    return pa.chunked_array([pa.array(wordfreq.top_n_list("en", vocabulary), type=pa.string())])


HEAVY_HITTER_USERS = 1_000_000  # heavy-hitter discovery needs phi n well above the noise of its levels
HH_MAX_LENGTH = 24  # bytes: the bundled words' longest is 18
HH_DESCRIPTION = (f"{HEAVY_HITTER_USERS} users, one English word each, drawn from wordfreq's frequencies of the "
                  f"{DEFAULT_VOCABULARY} most common words (seed {DEFAULT_SEED}); no candidate list is used")

SMALL_VOCABULARY = 100  # the bundled data of the protocols whose cost or error grows with the domain
SMALL_DESCRIPTION = (f"{DEFAULT_USERS} users, one of the {SMALL_VOCABULARY} most common English words each (the "
                     f"domain: B = {SMALL_VOCABULARY} categories), drawn from wordfreq's frequencies (seed "
                     f"{DEFAULT_SEED})")

CATEGORY_USERS = 2_000
CATEGORIES = 10
CATEGORY_DESCRIPTION = (f"{CATEGORY_USERS} users, each holding one of the {CATEGORIES} most common English words, "
                        f"drawn from wordfreq's frequencies (seed {DEFAULT_SEED}); the smallest category holds about "
                        "4.7% of the users")


def english_categories(n_users: int = CATEGORY_USERS, categories: int = CATEGORIES,
                       seed: int = DEFAULT_SEED) -> tuple[pa.ChunkedArray, list[str]]:
    """(items, the public list of categories): the bundled categorical data of the sampling + secret-sharing
    protocols, whose guarantee needs every category held by a share of the users."""
    return english_words(n_users, categories, seed), english_vocabulary(categories).to_pylist()


def english_words(n_users: int = DEFAULT_USERS, vocabulary: int = DEFAULT_VOCABULARY,
                  seed: int = DEFAULT_SEED) -> pa.ChunkedArray:
    """``n_users`` words sampled from real English word frequencies (deterministic for a seed)."""
    import wordfreq

    words = english_vocabulary(vocabulary)
    weights = np.array([wordfreq.word_frequency(w, "en") for w in words.to_pylist()])
    picks = np.random.default_rng(seed).choice(len(words), size=n_users, p=weights / weights.sum())
    return words.take(pa.array(picks))


DIGITS_DESCRIPTION = ("the 1,797 handwritten digits of UCI's optical recognition set as shipped by scikit-learn "
                      "(load_digits): 8 x 8 images, 64 pixel intensities 0..16 scaled to [0, 1], one image a user")


def digits_vectors() -> np.ndarray:
    """The bundled vector dataset: one user an image, d = 64 coordinates in [0, 1] (``DIGITS_DESCRIPTION``).

    Read from scikit-learn's own copy (no download). Real data with the skew of real telemetry: border pixels
    are almost always 0, the centre ones spread over [0, 1].
    """
    from sklearn.datasets import load_digits

    return load_digits().data / 16.0


SPARSE_USERS = 100_000
SPARSE_VOCABULARY = 1_000
SPARSE_DESCRIPTION = (f"{SPARSE_USERS} users, each holding one of the {SPARSE_VOCABULARY} most common English "
                      f"words (wordfreq's frequencies) as its coordinate and a weight drawn from Beta(2, 5) "
                      f"(synthetic; seed {DEFAULT_SEED})")


def sparse_vectors(n_users: int = SPARSE_USERS, vocabulary: int = SPARSE_VOCABULARY,
                   seed: int = DEFAULT_SEED) -> tuple[np.ndarray, list[str]]:
    """(pairs, coordinate names): the bundled 1-sparse data, one (word rank, weight) row a user.

    The coordinates are real (words drawn from real frequencies, as :func:`english_words`); the weights are
    synthetic, Beta(2, 5) (a skewed "time spent" share), since no package ships real per-user weights.
    """
    import wordfreq

    words = wordfreq.top_n_list("en", vocabulary)
    frequencies = np.array([wordfreq.word_frequency(w, "en") for w in words])
    rng = np.random.default_rng(seed)
    index = rng.choice(vocabulary, size=n_users, p=frequencies / frequencies.sum())
    return np.column_stack([index, rng.beta(2.0, 5.0, size=n_users)]), words


EXAMPLE_FILES = ("items.csv", "names.txt", "survey.csv", "answers.txt", "vectors.csv", "pairs.csv",
                 "coordinates.txt", "events.csv")


def _event_log(rng, users: int = 5_000) -> str:
    """``events.csv``'s text: each user 1 to 40 rows (Zipf), 70% of them his favourite of the 4 apps."""
    apps = np.array(["maps", "mail", "chat", "news"])
    rows = np.minimum(rng.zipf(1.6, users), 40)
    user = np.repeat(np.arange(users), rows)
    favourite = rng.choice(4, users, p=[0.4, 0.3, 0.2, 0.1])
    app = np.where(rng.random(user.size) < 0.7, favourite[user], rng.integers(0, 4, user.size))
    return "user,app\n" + "".join(f"d{u},{a}\n" for u, a in zip(user.tolist(), apps[app].tolist()))


def write_examples(folder: Path, seed: int = DEFAULT_SEED) -> list[Path]:
    """The small synthetic files the README's commands read (``privagg example-data DIR``), deterministic:

    * ``items.csv``: 20,000 users (columns ``user``, ``app``), each using one of 4 apps; ``names.txt``: the
      public app names, one a line, with one nobody uses;
    * ``survey.csv``: 1,000 answers (``answer``, one of 4 in ``answers.txt``) with each user's own
      epsilon (``eps``, 0.5 or 2) for weighted aggregation;
    * ``vectors.csv``: 5,000 users' vectors in [0, 1]^6, a few values up to 1.02 (for ``--clip``);
    * ``pairs.csv``: 20,000 users' (coordinate in [0, 2^40), weight in [0, 1]), half on 3 heavy coordinates,
      listed in ``coordinates.txt``;
    * ``events.csv``: an event log (columns ``user``, ``app``) of 5,000 users with 1 to 40 rows each
      (heavy-tailed), mostly their favourite app (``--user-column``).

    Returns the paths written; an existing file of these names is replaced.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    apps = rng.choice(["maps", "mail", "chat", "news"], size=20_000, p=[0.4, 0.3, 0.2, 0.1])
    answers = ["yes", "no", "maybe", "later"]
    survey = rng.choice(answers, size=1_000, p=[0.35, 0.3, 0.2, 0.15])
    epsilons = rng.choice([0.5, 2.0], size=survey.size)
    vectors = rng.random((5_000, 6)) * 1.02
    heavy = [7, 2**33 + 5, 2**40 - 1]
    coordinates = np.where(rng.random(20_000) < 0.5, rng.choice(heavy, 20_000), rng.integers(0, 2**40, 20_000))
    texts = {
        "items.csv": "user,app\n" + "".join(f"{i},{a}\n" for i, a in enumerate(apps)),
        "names.txt": "maps\nmail\nchat\nnews\ngames\n",
        "survey.csv": "answer,eps\n" + "".join(f"{a},{e}\n" for a, e in zip(survey, epsilons)),
        "answers.txt": "".join(f"{a}\n" for a in answers),
        "vectors.csv": "a,b,c,d,e,f\n" + "".join(",".join(f"{v:.4f}" for v in row) + "\n" for row in vectors),
        "pairs.csv": "coordinate,weight\n" + "".join(f"{c},{w:.4f}\n" for c, w in zip(coordinates,
                                                                                      rng.random(20_000))),
        "coordinates.txt": "".join(f"{c}\n" for c in heavy),
        "events.csv": _event_log(np.random.default_rng(seed + 1)),
    }
    for name, text in texts.items():
        (folder / name).write_text(text)
    return [folder / name for name in EXAMPLE_FILES]
