"""Reading corpora: the readers that turn what a user has (TSV, NeMo, Lhotse, Kaldi, LibriSpeech,
HW4 features, folders of audio) into utterance records, safe `.npy` loading, word times as CTM."""
