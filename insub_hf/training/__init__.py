"""Training: InSubTrainer (the loss, side metrics, strict resume, the objective's per-step hooks), the arguments it
takes (`training_args.py`: InSubTrainingArguments and the fast path's defaults) and the collapse monitor."""
