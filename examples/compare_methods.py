"""Compare Baseline, SSL-Ensemble, MC Dropout, BatchEnsemble and InSub on calibration, OOD detection,
corruptions and cost; writes results.md, results.json and PNG plots to --output_dir.

    python examples/compare_methods.py                                  # bundled Fashion-MNIST, M=5, one seed
    python examples/compare_methods.py --num_heads 3 5 10 --seeds 0 1 2  # the full table (runs are cached)
    python examples/compare_methods.py --objective byol --methods baseline insub    # another image objective
    python examples/compare_methods.py --dataset cifar10 --ood_dataset svhn --train_per_class 0 \\
        --test_per_class 0 --num_train_epochs 200 --per_device_train_batch_size 510 --encoder resnet18_cifar --width 1

The same as `insub-hf compare` (its argument groups and parser: the Trainer's flags start from the image recipe's
training, `insub_hf.recipes.IMAGE`).
"""

from insub_hf.cli import job_parser
from insub_hf.jobs.compare import ARGUMENT_GROUPS, TRAINING_DEFAULTS, run_comparison

if __name__ == "__main__":
    run_comparison(*job_parser("compare", ARGUMENT_GROUPS, TRAINING_DEFAULTS).parse_args_into_dataclasses())
