"""What a model's uncertainty is, in one place: the oriented spread of its heads, that spread standardised by
sentence length (`length`), and the k-NN bank with its one distance (`knn`); `reading` is how an `InSubModel`
serves it. The evaluation measures these readings; it does not define its own."""
