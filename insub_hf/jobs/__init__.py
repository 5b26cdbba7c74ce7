"""Jobs: the `insub-hf` commands (demo, compare, ablation, mechanism, text, genomics, hub), each a module with its
argument groups and a `run` function; front-ends over `insub_hf.protocol` (the experiment runner, the shared
argument groups and the comparison protocol)."""
