"""SCD pretraining with InSub heads on a BERT-style encoder, then SentEval-style transfer (same as `insub-hf text`).

    # offline: the packaged all-MiniLM-L6-v2, the bundled tweets as corpus and transfer task
    python examples/pretrain_scd.py --output_dir runs/text

    # the paper's setting: 1M Wikipedia sentences from a text file, SentEval tasks from the Hub
    python examples/pretrain_scd.py --encoder bert-base-uncased --corpus wiki1m_for_simcse.txt \
        --batch_size 192 --head_size 4096 --num_heads 3 --tasks MR CR SUBJ MPQA SST2 TREC MRPC STSB
"""

from transformers import HfArgumentParser

from insub_hf.protocol.arguments import HubArguments
from insub_hf.jobs.text import TextArguments, run_text

if __name__ == "__main__":
    run_text(*HfArgumentParser((TextArguments, HubArguments)).parse_args_into_dataclasses())
