"""Utterances in, padded feature batches out: manifest readers, audio, the torch-only front end
(las.data.signal), features and their cache, augmentation, where speech and pauses lie
(las.data.segmentation), and length-bucketed batching.

Layer 1: may use las.core.
"""
