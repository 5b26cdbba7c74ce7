"""The text release's transfer check, fold after fold and in parallel processes, side by side in one run: the
10-fold logistic regression (`senteval.classify_cv`, inner 5-fold tuning) on the released text model's frozen
embeddings of the 3,000 bundled transfer tweets the release draws: in parallel processes, fold after fold in this
process (both with single-threaded fits), and fold after fold with BLAS's own threads (the code before). Prints the
wall times, their ratios and whether the numbers are the same.

    python benchmarks/transfer_folds.py [--model model_cards/insub-minilm-scd]

About 6 minutes on a quiet 2-core machine (the last way takes 4).
"""

from __future__ import annotations

import argparse
import time
from contextlib import nullcontext
from unittest.mock import patch

import numpy as np

from insub_hf import InSubModel
from insub_hf.data import balanced_indices, load_tweet_sentiment
from insub_hf.evaluation import senteval
from insub_hf.model.sentence_embeddings import InSubSentenceEncoder
from transformers import AutoTokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="model_cards/insub-minilm-scd")
    options = parser.parse_args()
    tweets = load_tweet_sentiment("transfer")
    tweets = tweets.select(balanced_indices(np.asarray(tweets["label"]), 1000, 0))  # as the release draws them
    encoder = InSubSentenceEncoder(InSubModel.from_pretrained(options.model).eval(),
                                   AutoTokenizer.from_pretrained(options.model))
    features, labels = encoder.encode(list(tweets["text"])).embeddings.numpy(), np.asarray(tweets["label"])
    print(f"[folds] {len(labels)} tweets embedded; 10-fold transfer in parallel processes, then fold after fold",
          flush=True)
    start = time.perf_counter()
    parallel = senteval.classify_cv(features, labels, folds=10, seed=0)
    parallel_s = time.perf_counter() - start
    senteval.PARALLEL_FROM, senteval._FITTED = 10 ** 9, {}
    start = time.perf_counter()
    serial = senteval.classify_cv(features, labels, folds=10, seed=0)
    serial_s = time.perf_counter() - start
    senteval._FITTED = {}
    with patch.object(senteval, "threadpool_limits", lambda limit: nullcontext()):  # as before: BLAS's own threads
        start = time.perf_counter()
        threaded = senteval.classify_cv(features, labels, folds=10, seed=0)
        threaded_s = time.perf_counter() - start
    print(f"[folds] parallel processes {parallel_s:.1f} s; fold after fold {serial_s:.1f} s (ratio "
          f"{parallel_s / serial_s:.2f}, the same numbers: {parallel == serial}); fold after fold with BLAS's threads "
          f"(before this change) {threaded_s:.1f} s (ratio {parallel_s / threaded_s:.2f}; accuracy "
          f"{100 * threaded['accuracy']:.2f} % against {100 * parallel['accuracy']:.2f} %)", flush=True)


if __name__ == "__main__":
    main()
