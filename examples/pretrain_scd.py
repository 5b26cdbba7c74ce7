"""SCD pretraining with InSub heads on a BERT-style encoder, then SentEval-style transfer (same as `insub-hf text`).

    # offline: the packaged all-MiniLM-L6-v2, the bundled tweets as corpus and transfer task
    python examples/pretrain_scd.py --output_dir runs/text

    # the paper's setting: 1M Wikipedia sentences from a text file, SentEval tasks from the Hub
    python examples/pretrain_scd.py --encoder bert-base-uncased --corpus wiki1m_for_simcse.txt \
        --per_device_train_batch_size 192 --head_size 4096 --num_heads 3 --tasks MR CR SUBJ MPQA SST2 TREC MRPC STSB

The text job's arguments and the Trainer's own (`--learning_rate`, `--lr_scheduler_type`, `--push_to_hub`, ...),
starting from the text recipe's training (`insub_hf.recipes.TEXT`).
"""

from insub_hf.cli import job_parser
from insub_hf.jobs.text import ARGUMENT_GROUPS, TRAINING_DEFAULTS, run_text

if __name__ == "__main__":
    run_text(*job_parser("text", ARGUMENT_GROUPS, TRAINING_DEFAULTS).parse_args_into_dataclasses())
