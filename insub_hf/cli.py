"""The `insub-hf` command line."""

from __future__ import annotations

import sys

from transformers import HfArgumentParser

COMMANDS = {
    "demo": "SimCLR pretraining of a baseline and an InSub model on the bundled Fashion-MNIST subset.",
    "compare": "Baseline, SSL-Ensemble, MC Dropout, BatchEnsemble and InSub: calibration, OOD, corruptions, cost.",
    "text": "SCD pretraining (baseline and InSub) on a BERT-style encoder, then SentEval-style transfer.",
    "genomics": "Self-GenomeNet pretraining (baseline and InSub) on DNA, then calibrated sequence classification.",
    "hub": "A saved model and its evaluation results -> a checked Hub repo folder with a generated card; --push.",
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        usage = "\n".join(f"  {name:<8} {text}" for name, text in COMMANDS.items())
        print(f"usage: insub-hf COMMAND [--help]\n\ncommands:\n{usage}")
        return 0 if argv[:1] in ([], ["-h"], ["--help"]) else 2
    command, rest = argv[0], argv[1:]
    if command == "demo":
        from .demo import DemoArguments, run_demo

        (args,) = HfArgumentParser(DemoArguments).parse_args_into_dataclasses(args=rest)
        run_demo(args)
    elif command == "compare":
        from .evaluation.comparison import ComparisonArguments, run_comparison
        from .evaluation.harness import HarnessArguments
        from .evaluation.probes import ProbeArguments

        parser = HfArgumentParser((ComparisonArguments, ProbeArguments, HarnessArguments))
        run_comparison(*parser.parse_args_into_dataclasses(args=rest))
    elif command == "text":
        from .text_job import TextArguments, run_text

        (args,) = HfArgumentParser(TextArguments).parse_args_into_dataclasses(args=rest)
        run_text(args)
    elif command == "genomics":
        from .genomics_job import GenomicsArguments, run_genomics

        (args,) = HfArgumentParser(GenomicsArguments).parse_args_into_dataclasses(args=rest)
        run_genomics(args)
    elif command == "hub":
        from .hub_job import HubArguments, run_hub

        (args,) = HfArgumentParser(HubArguments).parse_args_into_dataclasses(args=rest)
        run_hub(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
