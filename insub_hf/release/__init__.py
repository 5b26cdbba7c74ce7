"""The release wing: `insub-hf release RECIPE` from training to a Hub folder with its card (`build`), the text
release's readings (`text_reading`), the sections only a release's card has (`cards`), and the upload of what is
built (`publish`)."""
