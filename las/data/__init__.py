"""Utterances in, padded feature batches out: readers, audio, features and their cache, batching."""
