"""insub-minilm-scd: the card of a model whose files are not here. Loading this folder with remote code stops here, saying how to build the folder."""

raise ImportError("insub-minilm-scd holds the card of insub-minilm-scd only (its files are over the repository's size limits), no model: `insub-hf release text` builds it into runs/release/text/hub in about 19 min on a 2-core CPU machine (quiet); load that folder, or the Hub repo it was pushed to.")
