"""The InSub model: its config, the encoder with its M heads (InSubModel), pretraining (InSubForPreTraining), the
classifiers and their outputs."""
