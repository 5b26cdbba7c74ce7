"""Uncertainty of a representation, scored as a representation's (Kirchhof et al., "URL: A Representation Learning
Benchmark for Transferable Uncertainty Estimates", NeurIPS 2023): R-AUROC is the AUROC with which a query's
uncertainty predicts that its nearest neighbour in a labelled gallery has another class. No classifier is trained;
it works for any modality."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F


def nearest_neighbour_errors(queries, query_labels, gallery, gallery_labels, batch_size: int = 4096) -> torch.Tensor:
    """`(Q,)` booleans: the query's nearest gallery item by cosine similarity has another label.

    Args:
        queries: `(Q, d)`; query_labels: `(Q,)`; gallery: `(G, d)`; gallery_labels: `(G,)`.
    """
    queries, gallery = (F.normalize(torch.as_tensor(x, dtype=torch.float32), dim=1) for x in (queries, gallery))
    if queries.dim() != 2 or gallery.dim() != 2 or queries.shape[1] != gallery.shape[1] or not len(gallery):
        raise ValueError(f"queries (Q, d) and a non-empty gallery (G, d) of one width are needed, got "
                         f"{tuple(queries.shape)} and {tuple(gallery.shape)}.")
    nearest = torch.cat([(chunk @ gallery.T).argmax(dim=1) for chunk in queries.split(batch_size)])
    return torch.as_tensor(gallery_labels)[nearest] != torch.as_tensor(query_labels)


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
