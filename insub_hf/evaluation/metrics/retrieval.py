"""Uncertainty of a representation, scored as a representation's (Kirchhof et al., "URL: A Representation Learning
Benchmark for Transferable Uncertainty Estimates", NeurIPS 2023): R-AUROC is the AUROC with which a query's
uncertainty predicts that its nearest neighbour in a labelled gallery has another class. No classifier is trained;
it works for any modality."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F


def nearest_neighbours(queries, gallery, batch_size: int = 4096) -> tuple[torch.Tensor, torch.Tensor]:
    """Each query's nearest gallery item by cosine similarity: (its index `(Q,)`, the similarity `(Q,)`).

    Args:
        queries: `(Q, d)`; gallery: `(G, d)`.
    """
    queries, gallery = (F.normalize(torch.as_tensor(x, dtype=torch.float32), dim=1) for x in (queries, gallery))
    if queries.dim() != 2 or gallery.dim() != 2 or queries.shape[1] != gallery.shape[1] or not len(gallery):
        raise ValueError(f"queries (Q, d) and a non-empty gallery (G, d) of one width are needed, got "
                         f"{tuple(queries.shape)} and {tuple(gallery.shape)}.")
    best = [(chunk @ gallery.T).max(dim=1) for chunk in queries.split(batch_size)]
    return torch.cat([b.indices for b in best]), torch.cat([b.values for b in best])


def nearest_neighbour_errors(queries, query_labels, gallery, gallery_labels, batch_size: int = 4096) -> torch.Tensor:
    """`(Q,)` booleans: the query's nearest gallery item by cosine similarity has another label.

    Args:
        queries: `(Q, d)`; query_labels: `(Q,)`; gallery: `(G, d)`; gallery_labels: `(G,)`.
    """
    nearest, _ = nearest_neighbours(queries, gallery, batch_size)
    return torch.as_tensor(gallery_labels)[nearest] != torch.as_tensor(query_labels)


def split_half_r_auroc(embeddings, uncertainty, labels) -> dict[str, float | None]:
    """R-AUROC on one labelled set: every other item `(0, 2, 4, ...)` is the gallery, the rest the queries. Returns
    the R-AUROC of `uncertainty` `(N,)` (higher = less certain) and, as the baseline any user has, of the cosine
    distance to the nearest gallery item (None where no retrieval was wrong)."""
    embeddings, uncertainty = torch.as_tensor(embeddings), torch.as_tensor(uncertainty)
    labels = torch.as_tensor(labels)
    gallery, queries = torch.arange(0, len(labels), 2), torch.arange(1, len(labels), 2)
    nearest, similarity = nearest_neighbours(embeddings[queries], embeddings[gallery])
    errors = labels[gallery][nearest] != labels[queries]
    out = {"r_auroc_uncertainty": r_auroc(uncertainty[queries], errors),
           "r_auroc_nn_distance": r_auroc(1 - similarity, errors)}
    return {key: None if value != value else value for key, value in out.items()}


def r_auroc(uncertainty, retrieval_errors) -> float:
    """AUROC of `uncertainty` `(Q,)` (higher = less certain) for predicting `retrieval_errors` `(Q,)` (True: the
    nearest neighbour has another class; `nearest_neighbour_errors`). 0.5 is chance; NaN when every retrieval is right
    or every one is wrong (no errors to rank)."""
    from sklearn.metrics import roc_auc_score

    uncertainty = np.asarray(torch.as_tensor(uncertainty, dtype=torch.float64)).ravel()
    errors = np.asarray(torch.as_tensor(retrieval_errors)).ravel().astype(bool)
    if uncertainty.shape != errors.shape or not np.isfinite(uncertainty).all():
        raise ValueError(f"r_auroc: finite uncertainties and errors of one length are needed, got "
                         f"{uncertainty.shape} and {errors.shape}.")
    if errors.all() or not errors.any():
        return float("nan")
    return float(roc_auc_score(errors, uncertainty))
