"""Jobs: the `insub-hf` commands (demo, compare, text, genomics, hub), each a module with its argument groups and a
`run` function, sharing one experiment runner (`runner.Experiment`) and the Hub argument group."""
