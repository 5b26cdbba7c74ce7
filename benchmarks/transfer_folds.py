"""The text release's transfer check with single-threaded fits and with BLAS's own threads, side by side in one run:
the 10-fold logistic regression (`senteval.classify_cv`, inner 5-fold tuning) on the released text model's frozen
embeddings of the 3,000 bundled transfer tweets the release draws. Prints both wall times, their ratio and the
accuracies.

    python benchmarks/transfer_folds.py [--model model_cards/insub-minilm-scd]

About 5 minutes on a quiet 2-core machine (the threaded way takes 4).
"""

from __future__ import annotations

import argparse
import time
from contextlib import nullcontext
from unittest.mock import patch

import numpy as np
from transformers import AutoTokenizer

from insub_hf import InSubModel
from insub_hf.data import balanced_indices, load_tweet_sentiment
from insub_hf.evaluation import senteval
from insub_hf.model.sentence_embeddings import InSubSentenceEncoder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="model_cards/insub-minilm-scd")
    options = parser.parse_args()
    tweets = load_tweet_sentiment("transfer")
    tweets = tweets.select(balanced_indices(np.asarray(tweets["label"]), 1000, 0))  # as the release draws them
    encoder = InSubSentenceEncoder(InSubModel.from_pretrained(options.model).eval(),
                                   AutoTokenizer.from_pretrained(options.model))
    features, labels = encoder.encode(list(tweets["text"])).embeddings.numpy(), np.asarray(tweets["label"])
    print(f"[folds] {len(labels)} tweets embedded; 10-fold transfer single-threaded, then with BLAS's threads",
          flush=True)
    start = time.perf_counter()
    single = senteval.classify_cv(features, labels, folds=10, seed=0)
    single_s = time.perf_counter() - start
    senteval._FITTED.clear()
    with patch.object(senteval, "threadpool_limits", lambda limit: nullcontext()):  # as before: BLAS's own threads
        start = time.perf_counter()
        threaded = senteval.classify_cv(features, labels, folds=10, seed=0)
        threaded_s = time.perf_counter() - start
    print(f"[folds] single-threaded {single_s:.1f} s, with BLAS's threads {threaded_s:.1f} s: ratio "
          f"{single_s / threaded_s:.2f}; accuracy {100 * single['accuracy']:.2f} % and {100 * threaded['accuracy']:.2f} %",
          flush=True)


if __name__ == "__main__":
    main()
