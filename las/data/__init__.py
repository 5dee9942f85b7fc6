"""Utterances in, padded feature batches out, in four parts by job: reading corpora
(las.data.corpora), audio and the front end (las.data.front_end), augmentation
(las.data.augmentation) and the feature cache (las.data.cache); length-bucketed batches and the
epoch's loader here.

Layer 1: may use las.core.
"""
