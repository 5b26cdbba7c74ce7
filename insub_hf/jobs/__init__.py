"""Jobs: the `insub-hf` commands (demo, compare, ablation, mechanism, text, text-candidates, genomics, hub, release),
each a module with its argument groups and a `run` function, and what they share: the experiment runner
(`experiment.Experiment`: pretrain named variants, cached or resumable; `pretraining`), the argument groups
(`arguments`), the compared methods (`methods`), the comparison protocol (`comparison`: data, run cache, one table
cell; `evaluation_cache`) and the training callbacks (`callbacks`)."""
