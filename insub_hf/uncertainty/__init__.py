"""What a model's uncertainty is, in one place: the registry of readings (`readings`: the oriented spread, that
spread standardised by sentence length, the k-NN distance, and the calibrated combination of the k-NN distance and
the spread), the k-NN bank with its one distance (`knn`), the calibrated reading's arithmetic (`conformal`) and its
fitting (`fitting`); `reading` is how an `InSubModel` serves it. The evaluation measures these readings; it does not
define its own."""
