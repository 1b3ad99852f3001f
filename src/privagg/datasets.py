"""The bundled default dataset: English words drawn from real word frequencies.

No download at run time: the frequencies are the ``wordfreq`` package's
English list (its own bundled data, a blend of Wikipedia, subtitles, news,
books, web text, Twitter and Reddit). Each simulated user holds one word,
drawn independently with probability proportional to its frequency among the
``vocabulary`` most common words, so the counts have the heavy Zipf-like skew
of real telemetry. The vocabulary itself is public: it is the dataset's
default candidate list, which lets reports name the words.
"""

from __future__ import annotations

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
