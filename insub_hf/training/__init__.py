"""Training: InSubTrainer (the loss, side metrics, strict resume, the objective's per-step hooks) and the collapse
monitor; the arguments it takes are `training_args.py`, below the model."""
